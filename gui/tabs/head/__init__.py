"""The Head tab."""
