"""``inference.same_model``: whether a result can have come from the loaded model, the one decision that the
export (``contents.export_contents``) and the window's lenses (gui/state/lens_data.py) both ask."""
import dataclasses

import numpy as np
import pytest

from analysis.errors import ExportError
from analysis.export.contents import export_contents
from analysis.measures.head_scores import all_scores
from analysis.run.inference import same_model


def other_results(result):
    """``result`` as if from another model: another label, one layer fewer, one head fewer, a wider d_model."""
    L, n, d = result.layer_inputs.shape
    return {"label": dataclasses.replace(result, model_label="another model"),
            "layers": dataclasses.replace(result, attentions=result.attentions[:-1]),
            "heads": dataclasses.replace(result, attentions=result.attentions[:, :-1]),
            "d_model": dataclasses.replace(result, layer_inputs=np.zeros((L, n, d + 1), dtype=np.float32))}


def test_a_result_is_of_the_model_that_ran_it(tiny_model, tiny_result):
    assert same_model(tiny_model, tiny_result)


@pytest.mark.parametrize("change", ["label", "layers", "heads", "d_model"])
def test_a_result_of_another_model_is_not_and_the_export_says_so(tiny_model, tiny_result, change):
    other = other_results(tiny_result)[change]
    assert not same_model(tiny_model, other)
    with pytest.raises(ExportError, match=r"^The model changed since this result was computed: run the text again, "
                                          r"then export\.$"):
        export_contents(tiny_model, other, all_scores(tiny_result))


def test_the_window_and_the_export_asked_the_same_question(tiny_model):
    """The window compared ``loaded.info``'s label and shape, the export ``loaded.source.label`` and the shape: the
    info is made from the source and the shape, so the two never answered differently."""
    info = tiny_model.info
    assert info.label == tiny_model.source.label
    assert (info.n_layer, info.n_head, info.d_model) == (tiny_model.n_layer, tiny_model.n_head, tiny_model.d_model)
