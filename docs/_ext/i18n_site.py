"""The site in English, Korean and Japanese (named by string in conf.py).

English is the source. ``nox -s docs-i18n`` builds each translation from the catalogs
in ``docs/locales/<language>/LC_MESSAGES/`` (one per page), into
``docs/_build/html/<language>/``, beside English in ``docs/_build/html/en/``.
"""

from __future__ import annotations

import os

# Set by `nox -s docs-i18n`: read the English run's gallery pages and figures as they
# are, rather than run the examples again.
REUSE_EXAMPLES = os.environ.get("POSENC_DOCS_REUSE_EXAMPLES") == "1"

# Every language of the site: its code, and its name as its readers write it.
LANGUAGES = {"en": "English", "ko": "한국어", "ja": "日本語"}
TRANSLATIONS = ("ko", "ja")

# The learner's path: the pages that are translated completely, in every language.
LEARNERS_PATH = (
    "index",
    "seeds",
    "guide/tokens",
    "guide/order",
    "guide/positions",
    "guide/precision",
    "auto_examples/sinusoid/plot_01_waveforms",
    "auto_examples/sinusoid/plot_02_heatmap",
    "auto_examples/sinusoid/plot_03_step05_demo",
    "auto_examples/sinusoid/plot_04_similarity",
    "auto_examples/sinusoid/plot_05_wavelengths",
    "auto_examples/sinusoid/plot_06_attention_order",
    "auto_examples/practice/plot_07_precision",
    "auto_examples/practice/plot_08_layouts",
    "auto_examples/practice/plot_09_decoding_with_offsets",
)
# On the API page, the entries of these objects (their docstrings and their members').
API_PAGE = "api"
API_ENTRIES = ("Embeddings", "PositionalEncoding", "TokenAndPositionEmbedding", "sinusoidal_table")


def setup(app):  # type: ignore[no-untyped-def]
    return {"parallel_read_safe": True, "parallel_write_safe": True}
