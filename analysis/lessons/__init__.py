"""The lessons: GPT-2 attention by hand in numpy (manual_attention), the calculator, and the small experiments (lab)."""
