"""A text as an instruct model reads it in a chat: one user turn in the model's own chat template.

With ``chat`` on (``--chat``, the app's *Chat format*) a run's ids are::

    tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True, tokenize=True)

so the template's own tokens (ChatML's ``<|im_start|>user↵`` … ``<|im_end|>↵<|im_start|>assistant↵``, a default
system turn when the template writes one) are in the run and in the token strip like any other token, and the
next-token predictions are the reply's first token: the model has just read the assistant's header.

The template decides the special tokens. It is rendered and tokenised with ``add_special_tokens=False``, as
``apply_chat_template`` does: a template that writes BOS itself (``{{ bos_token }}``) gets it once, one that
writes none gets none, and the BOS switch is not used (``result.bos`` then says whether the template put the
tokenizer's BOS first).

Templates are rendered by transformers (``apply_chat_template``) in jinja2's ``ImmutableSandboxedEnvironment``:
a template is data, it cannot reach Python's objects or the file system, and nothing in a model's files runs
as code.

The frame (:class:`ChatFrame`): the template rendered around a placeholder splits into the text before the user's
text (``head``) and after it (``tail``: the end of the user's turn and the assistant's header). The cap rule uses
it: a text too long for the token cap keeps the whole frame and loses the end of its own text
(``analysis.run.tokenize.tokenize``).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import ChatFormatError, one_line
from ..model.loaded import LoadedModel

ROLE = "user"
#: What the frame is rendered around: private-use characters, which no template looks for.
PLACEHOLDER = "\ue000AttnScope\ue001"
REMEDY = "run without --chat (untick Chat format)"


def _label(loaded: LoadedModel) -> str:
    return loaded.source.label


def messages(text: str) -> list[dict[str, str]]:
    """The conversation a text becomes: one user turn."""
    return [{"role": ROLE, "content": text}]


def _apply(loaded: LoadedModel, text: str, tokenize: bool):
    """``apply_chat_template`` on ``text`` as one user turn with the assistant's header after it; ChatFormatError
    (the problem in one sentence) when the model has no template or it fails to render."""
    tokenizer = loaded.tokenizer
    if not getattr(tokenizer, "chat_template", None):
        raise ChatFormatError(f"The model {_label(loaded)} has no chat template; {REMEDY}.")
    extra = {"return_dict": False, "tokenizer_kwargs": {"verbose": False}} if tokenize else {}
    try:
        return tokenizer.apply_chat_template(messages(text), add_generation_prompt=True, tokenize=tokenize, **extra)
    except Exception as exc:  # jinja's syntax and runtime errors, a template's raise_exception, a dict with no default
        raise ChatFormatError(f"The chat template of {_label(loaded)} could not be rendered "
                              f"({type(exc).__name__}: {one_line(exc, 200)}); {REMEDY}.") from None


def render_turn(loaded: LoadedModel, text: str) -> str:
    """``text`` as one user turn in the model's chat template, the assistant's header after it (a string)."""
    return _apply(loaded, text, tokenize=False)


def chat_ids(loaded: LoadedModel, text: str) -> list[int]:
    """The ids of ``text`` as one user turn: ``apply_chat_template(..., add_generation_prompt=True, tokenize=True)``
    (the rendering tokenised with ``add_special_tokens=False``: the template's special tokens only)."""
    return [int(i) for i in _apply(loaded, text, tokenize=True)]


def _ids(loaded: LoadedModel, part: str) -> tuple[int, ...]:
    return tuple(loaded.tokenizer(part, add_special_tokens=False, verbose=False)["input_ids"]) if part else ()


@dataclass(frozen=True)
class ChatFrame:
    """The chat template around one user turn: ``head`` + the user's text + ``tail``, as strings and as the ids
    each tokenises to alone."""

    head: str  # the rendering before the user's text (a system turn, the user's header)
    tail: str  # after it: the end of the user's turn and the assistant's header (the generation prompt)
    head_ids: tuple[int, ...]
    tail_ids: tuple[int, ...]

    @property
    def n_ids(self) -> int:
        """The template's tokens around a text (head and tail, each tokenised alone)."""
        return len(self.head_ids) + len(self.tail_ids)

    def wrap(self, text_ids) -> list[int]:
        """``text_ids`` between the frame's ids."""
        return [*self.head_ids, *text_ids, *self.tail_ids]

    def content_of(self, rendered: str) -> str | None:
        """The user's text as the template put it into ``rendered`` (a template may trim it), or None when
        ``rendered`` is not this frame around some text (a template that writes something else for this text)."""
        if len(rendered) < len(self.head) + len(self.tail):
            return None
        if not (rendered.startswith(self.head) and rendered.endswith(self.tail)):
            return None
        return rendered[len(self.head):len(rendered) - len(self.tail)]


def chat_frame(loaded: LoadedModel) -> ChatFrame:
    """The model's chat template around a placeholder, split there; ChatFormatError when the model has no
    template, it fails to render, or it does not hold the user's text exactly once."""
    rendered = render_turn(loaded, PLACEHOLDER)
    if rendered.count(PLACEHOLDER) != 1:
        raise ChatFormatError(f"The chat template of {_label(loaded)} does not hold the user's text once in its "
                              f"turn; {REMEDY}.")
    head, tail = rendered.split(PLACEHOLDER)
    return ChatFrame(head, tail, _ids(loaded, head), _ids(loaded, tail))


def chat_problem(loaded: LoadedModel) -> str | None:
    """Why ``loaded`` cannot run a text in its chat format (a sentence naming the model, without the advice to
    run without it: the app shows it as the switch's tooltip), or None when it can."""
    try:
        chat_frame(loaded)
    except ChatFormatError as exc:
        return str(exc).removesuffix(f"; {REMEDY}.") + "."
    return None


def starts_with_bos(loaded: LoadedModel, ids) -> bool:
    """Whether ``ids`` start with the tokenizer's BOS token (what ``result.bos`` says of a chat run: the template
    put it there)."""
    bos = loaded.bos_token
    return bool(ids) and bos is not None and int(ids[0]) == loaded.tokenizer.convert_tokens_to_ids(bos)
