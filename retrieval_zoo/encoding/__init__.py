"""Text to tensors: backbones, the encoder and its tokenizer, token caches, batching, and a corpus's encoding."""
