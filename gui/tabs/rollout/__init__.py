"""The Rollout tab."""
