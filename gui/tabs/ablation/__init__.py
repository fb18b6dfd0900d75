"""The Ablation tab."""
