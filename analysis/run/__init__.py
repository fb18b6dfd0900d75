"""Running text: tokenizing, the memory check, the forward with its capture, and the frozen AttentionResult."""
