"""Language models: loading checkpoints and tokenizers, chat formatting, sampling, the exact trie walk, the
packaged real checkpoints."""
