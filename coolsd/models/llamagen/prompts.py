"""Prompts for the LlamaGen text-to-image model: examples, cleaning and validation for a prompt box.

The app shows `EXAMPLE_PROMPTS`, passes what the visitor typed through `check_prompt` (a ValueError
carries a message fit to show as is), and gives the original text to the model: the T5 encoder
cleans it again itself (`clean.clean_caption`), exactly as upstream does before tokenising.
"""

from __future__ import annotations

from coolsd.models.llamagen.clean import clean_caption

MAX_PROMPT_CHARS = 500  # (choice) T5 keeps 120 tokens (about 400-500 characters of English); the rest is cut

# Our own examples, short scenes of the kind LlamaGen's training captions (LAION-COCO) describe.
EXAMPLE_PROMPTS = (
    "A red fox sitting in fresh snow, morning light",
    "A bowl of ramen with a soft-boiled egg, top view",
    "A lighthouse on a rocky coast under a stormy sky",
    "An astronaut riding a horse on the moon, digital art",
    "A cozy living room with a fireplace and a sleeping cat",
    "A vintage blue car parked in front of a yellow wall",
)


def clean_prompt(text: str) -> str:
    """What the T5 encoder will read for `text` (upstream's cleaner, two passes); for showing it to a user."""
    return clean_caption(text)


def check_prompt(text, max_chars: int = MAX_PROMPT_CHARS) -> str:
    """`text` stripped, when LlamaGen can use it; else ValueError with a message for the user.

    Rejects a non-string, an empty prompt, one longer than `max_chars`, and one the cleaner empties
    (e.g. only a URL, an @handle or CJK characters, which the upstream cleaner removes).
    Returns the stripped original (not the cleaned text: the encoder cleans it).
    """
    if not isinstance(text, str):
        raise ValueError(f"the prompt must be text, got {type(text).__name__}")
    text = text.strip()
    if not text:
        raise ValueError("type a prompt: LlamaGen is a text-to-image model")
    if len(text) > max_chars:
        raise ValueError(f"the prompt is {len(text)} characters long; keep it under {max_chars}")
    if not clean_caption(text):
        raise ValueError(
            "nothing is left of this prompt after LlamaGen's caption cleaning "
            "(it drops URLs, @handles, HTML tags, file names and CJK characters): describe the image in words"
        )
    return text
