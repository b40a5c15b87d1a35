"""Training of the embedded default model: VQ tokenizer, AR target, Eagle-1 drafter, digit classifier.

Start reading at `cli.py` (`python -m coolsd.train`: the stages in order), then one module per stage
(vq.py, target.py, drafter.py with selfdistill.py, classifier.py), `loop.py` (the budgeted training
loop), `export.py` (writes assets/embedded/), `evaluate.py` and `acceptance.py`
(`python -m coolsd.train.acceptance`). The architectures themselves live in `coolsd.models`.
"""
