"""LoRA training with the soft-target (trie KL) and hard-target objectives."""
