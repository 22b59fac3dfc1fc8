from calibft.core.runlog import log_to
from calibft.data.output_space import SpaceSet
from calibft.data.trie import trie_set_for_spaces
from calibft.lm.models import load_tokenizer

log = log_to(snakemake.log[0])
tokenizer = load_tokenizer(snakemake.params.tokenizer)
tries = trie_set_for_spaces(tokenizer, SpaceSet.load(snakemake.input.space))
tries.save(snakemake.output[0])
log.info("%d tries, %d nodes in all, %s", len(tries), len(tries.node_parent), tries.metadata)
