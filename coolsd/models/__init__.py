"""Models behind the engine's protocol (`coolsd.decoding.protocol`: `TokenModel`, `Drafter`, `ImageTokenizer`).

Start reading at `bundle.py` (`ModelBundle`, `load_embedded`: the shipped digit model). `llama.py` is the Llama
layer stack with its KV cache, `embedded.py` the target on it, `eagle.py` the Eagle-1 drafter head, `graphs.py` /
`static.py` / `fused.py` / `rowkernel.py` the execution paths (eager, static shapes for CUDA graphs, the fused CPU
path), `tiny.py` a random-weight bundle for tests, `llamagen/` the LlamaGen T2I model (GPU) with its downloader
(`llamagen/fetch.py`, `python -m coolsd.fetch`). `timing.py` measures how long a model's calls take through the
protocol (the one home of forward timing: cost model, cost curves)."""
