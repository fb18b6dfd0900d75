"""The Head scores tab."""
