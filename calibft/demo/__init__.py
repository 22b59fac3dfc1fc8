"""What the demo builds instead of downloading: a tiny chat model and tiny NoveltyBench evaluators, trained or
initialized from a seed on the CPU."""
