"""Input: the model bar, the text box and its run controls, the token limit."""
