"""Caption cleaning as LlamaGen's T5 front end does it before tokenising (research/lantern.md §2.2 step 1).

LlamaGen (and LANTERN, which reuses its text encoder) cleans every prompt with the PixArt-alpha
caption cleaner, run twice, then lets FLAN-T5 tokenise the result. The model was trained on
captions cleaned that way, so a prompt must go through the same pass to get the same T5 states.
This is our own implementation of that documented behaviour, one named step per rule, in the
upstream order; `tests/models/test_llamagen.py` checks it against outputs read off the upstream code.

Needs `ftfy` and `beautifulsoup4` (LlamaGen path only; imported at the first call).
"""

from __future__ import annotations

import html
import re
import warnings
from urllib.parse import unquote_plus

# --- character classes ------------------------------------------------------------------------
# CJK strokes .. CJK unified ideographs: U+31C0..U+9FFF (seven adjacent Unicode blocks) are dropped
_CJK = re.compile("[\u31c0-\u9fff]+")
# every dash-like code point; a run of them becomes one ASCII hyphen
_DASHES = re.compile(
    "[\u002d\u058a\u05be\u1400\u1806\u2010-\u2015\u2e17\u2e1a\u2e3a\u2e3b\u2e40"
    "\u301c\u3030\u30a0\ufe31\ufe32\ufe58\ufe63\uff0d]+"
)
# symbols and brackets whose runs become one space
_JUNK_SYMBOLS = re.compile("[" + re.escape("#®•©™&@·º½¾¿¡§~)(][}{|\\/*") + "]+")
_FILE_EXT = "png|jpg|jpeg|bmp|webp|eps|pdf|apk|mp4"
_TLD = "com|co|ru|net|org|edu|gov|it"


def _url_pattern(scheme: str) -> re.Pattern:
    """A scheme prefix (`scheme:` then 1-3 slashes or one more character) or a bare domain with path."""
    return re.compile(
        rf"\b(?:{scheme}:(?:/{{1,3}}|[a-zA-Z0-9%])"  # "http://" / "https:x": only the scheme part
        rf"|[a-zA-Z0-9.\-]+\.(?:{_TLD})[\w/-]*\b/?(?!@))"  # "example.com/path" unless an e-mail follows
    )


# (pattern, replacement) in the order the cleaner applies them, before the ftfy/unescape step
_BEFORE_FIX = [
    (re.compile(r"<person>"), "person"),
    (_url_pattern("https?"), ""),
    (_url_pattern("www"), ""),
]
_AFTER_SOUP = [
    (re.compile(r"@\w+\b"), ""),  # @handles
    (_CJK, ""),
    (_DASHES, "-"),
    (re.compile("[`´«»“”¨]"), '"'),  # quotes to one form
    (re.compile("[‘’]"), "'"),
    (re.compile(r"&quot;?"), ""),  # entities left over
    (re.compile(r"&amp"), ""),
    (re.compile(r"\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}"), " "),  # IPv4 addresses
    (re.compile(r"\d:\d\d\s+$"), ""),  # a trailing "1:23" (article ids, times)
    (re.compile(r"\\n"), " "),  # a literal backslash-n
    (re.compile(r"#\d{1,3}\b"), ""),  # "#12"
    (re.compile(r"#\d{5,}\b"), ""),  # "#123456"
    (re.compile(r"\b\d{6,}\b"), ""),  # long numbers
    (re.compile(rf"\S+\.(?:{_FILE_EXT})"), ""),  # file names
    (re.compile("[\"']{2,}"), '"'),  # runs of quotes
    (re.compile(r"\.{2,}"), " "),  # ellipses
    (_JUNK_SYMBOLS, " "),
    (re.compile(r"\s+\.\s+"), " "),  # a lone " . "
]
_AFTER_FIX = [
    (re.compile(r"\b[a-zA-Z]{1,3}\d{3,15}\b"), ""),  # product codes: "ab1234"
    (re.compile(r"\b[a-zA-Z]+\d+[a-zA-Z]+\b"), ""),  # "ab12cd"
    (re.compile(r"\b\d+[a-zA-Z]+\d+\b"), ""),  # "12ab34"
    (re.compile(r"(worldwide\s+)?(free\s+)?shipping"), ""),  # shop boilerplate
    (re.compile(r"(free\s)?download(\sfree)?"), ""),
    (re.compile(r"\bclick\b\s(?:for|on)\s\w+"), ""),
    (re.compile(rf"\b(?:{_FILE_EXT})(\simage[s]?)?"), ""),
    (re.compile(r"\bpage\s+\d+\b"), ""),
    (re.compile(r"\b\d*[a-zA-Z]+\d+[a-zA-Z]+\d+[a-zA-Z\d]*\b"), " "),  # mixed ids "a1b2c3"
    (re.compile(r"\b\d+\.?\d*[xх×]\d+\.?\d*\b"), ""),  # sizes "2x2", "1.5×3" (Latin x, Cyrillic х, ×)
    (re.compile(r"\b\s+:\s+"), ": "),
    (re.compile(r"(\D[,./])\b"), r"\1 "),  # a space after , . / that follow a non-digit
    (re.compile(r"\s+"), " "),
    (re.compile(r"^[\"']([\w\W]+)[\"']$"), r"\1"),  # one pair of enclosing quotes
    (re.compile(r"^['_,\-:;]"), ""),  # one leading stray mark
    (re.compile(r"['_,\-:+]$"), ""),  # one trailing stray mark
    (re.compile(r"^\.\S+$"), ""),  # a lone ".token"
]
_SEPARATORS = re.compile(r"[-_]")
MAX_SEPARATORS = 3  # more hyphens/underscores than this: a slug ("my-cute-cat"), split into words


def _apply(text: str, steps) -> str:
    for pattern, replacement in steps:
        text = pattern.sub(replacement, text)
    return text


def clean_caption_once(text: str) -> str:
    """One pass of the cleaner: percent-decoding, lower case, URLs, HTML, handles, CJK, ids, sizes, punctuation."""
    import ftfy
    from bs4 import BeautifulSoup

    text = unquote_plus(str(text)).strip().lower()
    text = _apply(text, _BEFORE_FIX)
    with warnings.catch_warnings():  # bs4 warns when a caption looks like a URL or a file name
        warnings.simplefilter("ignore")
        text = BeautifulSoup(text, features="html.parser").text  # tags dropped, entities decoded
    text = _apply(text, _AFTER_SOUP)
    if len(_SEPARATORS.findall(text)) > MAX_SEPARATORS:
        text = _SEPARATORS.sub(" ", text)
    text = html.unescape(html.unescape(ftfy.fix_text(text))).strip()  # mojibake, double-escaped entities
    return _apply(text, _AFTER_FIX).strip()


def clean_caption(text: str) -> str:
    """The text LlamaGen's T5 encoder sees for a prompt: the cleaning pass applied twice, as upstream does.

    Upstream's pass is not idempotent (e.g. a quote pair exposed by the first pass goes in the
    second), so twice is the definition; a third pass may still change a rare caption.
    """
    return clean_caption_once(clean_caption_once(text))
