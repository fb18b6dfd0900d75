"""The From-scratch tab."""
