"""Training of the embedded default model: VQ tokenizer, AR target, Eagle-1 drafter, digit classifier."""
