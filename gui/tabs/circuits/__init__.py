"""The Circuits tab: direct logit attribution, the logit lens, activation patching and head composition."""
