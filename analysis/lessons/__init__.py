"""The lessons: GPT-2 attention by hand in numpy (manual_attention), the calculator built from its steps, and the small experiments (lab)."""
