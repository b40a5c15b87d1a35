"""The How it works tab: one round of speculative decoding, each rule's formulas (rendered LaTeX), the sliders."""

from __future__ import annotations

import gradio as gr

from coolsd.ui.context import Context

ID, TITLE = "how", "How it works"
LATEX = [{"left": "$$", "right": "$$", "display": True}, {"left": "$", "right": "$", "display": False}]

TEXT = r"""
### One round of speculative decoding
A small **drafter** $q$ proposes $L$ image tokens $\tilde x_1..\tilde x_L$; the big **target** $p$ scores all of
them in **one** forward pass. Left to right, draft $\tilde x_i$ is kept with probability $a_i$; at the first
rejection a replacement is drawn from a **residual** distribution and the round ends; if all $L$ pass, a bonus
token comes from $p_{L+1}$. Each round commits $n+1$ tokens for one target forward, so the
**mean accepted length** is $\tau = \text{tokens} / \text{target forwards}$ and vanilla AR has $\tau = 1$.

**Eagle-1** (lossless): exactly the target's distribution.
$$a_i = \min\Big(1, \frac{p(\tilde x_i)}{q(\tilde x_i)}\Big), \qquad r = \mathrm{Norm}\big([p - q]_+\big)$$

**LANTERN++** ($k$, $\lambda$): a draft also gets the target mass of its nearest codes in the VQ codebook
(latent neighbours $c_1, c_2, \dots$), up to $m \le k$ of them while that mass stays within $(\lambda-1)\,p(x)$:
$$\tilde p(x) = p(x) + \sum_{j \le m} p(c_j) \le \lambda\, p(x)$$
$$a_i = \min\Big(1, \frac{\tilde p(\tilde x_i)}{q(\tilde x_i)}\Big), \qquad r = \mathrm{Norm}\big([p - q']_+\big)$$
where $q'$ is $q$ set to zero on the $k+1$ nearest codes of $\tilde x_i$ whenever some neighbour mass was
pooled ($m \ge 1$), as in the published code. $\lambda = 1$ is Eagle-1.

**COOL-SD** ($\delta$, $\nu$, $\mu$): an annealed relaxation, generous early in the round and strict late,
with the optimal residual $G^*$ (the one that minimises the total variation of each step):
$$\omega_i = \delta\, e^{-\nu i - \mu}, \qquad a_i = \min\Big(1, \omega_i \frac{p(\tilde x_i)}{q(\tilde x_i)}\Big)$$
$$G^*_i = \mathrm{Norm}\big([\,p - \min(q, \omega_i p)\,]_+\big)$$
"mean ω = δ" sets $\mu = \log \frac{1}{L}\sum_{i=1}^{L} e^{-\nu i}$ so that the $\omega_i$ average $\delta$.
$\omega_i = 1$ for all $i$ ($\delta = 1, \nu = 0$) is exactly Eagle-1; $\nu = 0$ is uniform relaxation.

### What the sliders change
| slider | effect |
|---|---|
| temperature, top-k, CFG scale | how logits become $p$ and $q$ (same processing for both) |
| draft length $L$ | drafts per round: more speed if they are accepted, wasted drafter work if not |
| drafting | a chain of $L$ drafts, or a static tree verified in one forward (Eagle-1's 25 nodes) |
| $\delta$ | overall relaxation: larger = longer accepted runs, further from the target's distribution |
| $\nu$ | annealing: how fast $\omega_i$ falls along the round ($\nu = 0.7$ in the paper) |
| $\mu$ | shift of the schedule (only when "mean ω = δ" is off) |
| LANTERN++ $k$, $\lambda$ | neighbourhood size and budget of the latent relaxation |

### Reading the race
The four decoders take turns: the one that has used the **least compute time** runs next round, so every
frame compares them at the same compute budget; the speed-up is each decoder's tokens per compute second over
vanilla AR's in the same race. The overlay colours each token: **green** accepted draft,
**orange** resampled after a rejection, **blue** bonus / target sample. Relaxed rules trade exactness for
speed: compare the images and the Theory tab's exact error.

### Papers
[COOL-SD (arXiv 2601.09212)](https://arxiv.org/abs/2601.09212) ·
[LANTERN (arXiv 2410.03355)](https://arxiv.org/abs/2410.03355) ·
[LANTERN++ (arXiv 2502.06352)](https://arxiv.org/abs/2502.06352) ·
[EAGLE (arXiv 2401.15077)](https://arxiv.org/abs/2401.15077)
"""


def build(ctx: Context, tab: gr.Tab) -> None:
    gr.Markdown(TEXT, latex_delimiters=LATEX, elem_id="how")
