"""Input: the model bar, the text box and its run controls, examples, the token strip, the notes, the token limit."""
