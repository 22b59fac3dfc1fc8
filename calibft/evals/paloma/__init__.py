"""PALOMA perplexity and bits per byte (docs/metrics.md, PALOMA): does calibration fine-tuning cost language
modelling?

    python -m calibft.evals.paloma JOB     # JOB: a PalomaJob as JSON text or file

The model reads the documents of the PALOMA test slices (`allenai/paloma`, split `test`: `job.SLICES`) as plain
text, without chat template. Each document is tokenized on its own, without special tokens, and scored in
windows of `window` tokens (2048) that start every `stride` tokens (1024): every token but the document's
first is scored exactly once, the first window scoring all its tokens after the first and every later window
only the tokens the previous one did not reach, each with the context of its window (`metrics.windows`).

The score of a set of documents is the sum of their token NLLs (float32 log-softmax of the logits, summed in
float64; or in the logits' dtype, as the authors' release: `runner.documents_nll`), the number of scored tokens and
the number of UTF-8 bytes of their texts (all of them, the unscored first token's included):

    perplexity    = exp(sum NLL / scored tokens)
    bits per byte = sum NLL / (ln 2 * sum bytes)

per slice for the slice table, and pooled over the slices (the sums of the slice totals) for the model
summary. A document whose text is empty or only whitespace is left out of every total under `skip` (the
authors' release skips such rows: no document, no bytes) and counted like any other under `count` (a
document, its bytes, the NLL of whatever tokens it has): the `paloma_empty_documents` switch of
`calibft.core.protocol`. A document of one token is counted under both, with its bytes and no scored token.
A row whose `text` is not a string (missing, null, a number, a list) is no document under either value: it is
skipped, counted per slice (`non_string_documents`) and reported in the log (`runner.load_documents`), as the
release skips it (its `num_skipped_rows` counts such rows with the empty ones).

Inputs: one JSON-lines file per slice (gzip-compressed when named `.gz`) with a `text` field per document, as
the workflow downloads PALOMA and as the offline demo ships a few documents per slice. Outputs in `out_dir`:
`documents.jsonl.gz` (one object per document: slice, index, nll, tokens, bytes, empty; `index` is the
document's place among the slice's documents, `tokens` counts the scored tokens, `empty` marks an empty or
whitespace-only text) and `summary.json`, which `metrics.score` computes from those records and the per-slice counts
of rows without a string text (`documents`, `skipped_documents` and `non_string_documents` per slice and
pooled, `empty_documents` the rule), with the bootstrap interval of each perplexity and bits per byte over
resamples of the documents of each slice (`intervals`, `metrics.paloma_draws`; each slice's replicates kept for the
tables' means over models).

- `job`: `PalomaJob`, the slices, the windows' defaults, free of torch, so that the workflow imports them to plan.
- `metrics`: the windows, the totals and their figures, their bootstrap and summary.json.
- `runner`: the job: the slice files, the documents' NLL in batches of windows, the outputs.
"""
