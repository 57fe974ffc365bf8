"""Text of report PDFs in any script the installed fonts cover: Unicode TrueType fonts found on the machine,
embedded (as subsets) in each PDF, chosen per run of characters, with Arabic joined and right-to-left text
laid out in visual order.

PDF's standard Helvetica has Latin-1 only: a report named "週次レポート" or a row "Россия" printed as ■■■. The
fonts are read from the system, never fetched: DejaVu Sans (Debian's fonts-dejavu-core: Latin, Greek,
Cyrillic, Arabic, Hebrew) is the base font, Droid Sans Fallback (fonts-droid-fallback: Chinese and Japanese
kana and kanji) and NanumGothic (fonts-nanum: Korean) are used for the characters the base font lacks.
Without DejaVu Sans the base is Helvetica again, with whatever fallback is installed.

reportlab draws one font per run of text and no glyph substitution of its own (no shaping without
uharfbuzz): Arabic is first turned into its joined presentation forms (arabic-reshaper), and text with any
right-to-left character is reordered into display order by the Unicode bidirectional algorithm
(python-bidi). A right-to-left cell that wraps onto several lines is wrapped after reordering, so its lines
read bottom to top; a report's cells are short, and the CSV carries the text as stored.
"""

from __future__ import annotations

import logging
import re
import threading
import unicodedata
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

FONT_DIR = Path("/usr/share/fonts/truetype")
# name, regular file, bold file (None: the regular one); the first is the base font, the rest fallbacks.
BASE = ("TallySans", "dejavu/DejaVuSans.ttf", "dejavu/DejaVuSans-Bold.ttf")
FALLBACKS = (
    ("TallyCJK", "droid/DroidSansFallbackFull.ttf", None),
    ("TallyKorean", "nanum/NanumGothic.ttf", "nanum/NanumGothicBold.ttf"),
)
RTL = re.compile("[\u0590-\u08ff\ufb1d-\ufdff\ufe70-\ufefc]")
ARABIC = re.compile("[\u0600-\u06ff\u0750-\u077f\u08a0-\u08ff]")


@dataclass(frozen=True)
class Font:
    name: str  # as registered with reportlab
    covers: frozenset[int] | None  # code points with a glyph; None: a standard font (Windows-1252)

    def has(self, char: str) -> bool:
        if self.covers is None:
            try:
                char.encode("cp1252")
            except UnicodeEncodeError:
                return False
            return True
        return ord(char) in self.covers


@dataclass(frozen=True)
class Fonts:
    regular: tuple[Font, ...]  # the base font first, then the fallbacks
    bold: tuple[Font, ...]

    def runs(self, text: str, bold: bool = False) -> list[tuple[str, str]]:
        """`text` in display order, cut into (font name, text) runs: each character in the first font that
        has it (else the base font, which draws its missing-glyph box); spaces and marks stay in the run."""
        chain = self.bold if bold else self.regular
        if text.isascii():  # every base font has ASCII
            return [(chain[0].name, text)] if text else []
        if RTL.search(text):
            text = visual(text)
        runs: list[tuple[str, str]] = []
        for char in text:
            keep = char.isspace() or unicodedata.category(char)[0] in "MC"  # marks, controls
            name = runs[-1][0] if runs and keep else next((f.name for f in chain if f.has(char)), chain[0].name)
            if runs and runs[-1][0] == name:
                runs[-1] = (name, runs[-1][1] + char)
            else:
                runs.append((name, char))
        return runs


def visual(text: str) -> str:
    """Right-to-left text as it is drawn left to right: Arabic letters joined, every run in display order."""
    from bidi import get_display

    if ARABIC.search(text):
        import arabic_reshaper

        text = arabic_reshaper.reshape(text)
    return get_display(text)


_lock = threading.Lock()
_fonts: Fonts | None = None


def fonts() -> Fonts:
    """The fonts of report PDFs, registered with reportlab once per process."""
    global _fonts
    with _lock:
        if _fonts is None:
            _fonts = _register()
        return _fonts


def _register() -> Fonts:
    from reportlab.pdfbase import pdfmetrics
    from reportlab.pdfbase.ttfonts import TTFont

    def load(name: str, file: str) -> Font | None:
        path = FONT_DIR / file
        if not path.is_file():
            return None
        try:
            # No shaping: Arabic arrives shaped and in display order (visual), which harfbuzz would reverse.
            font = TTFont(name, str(path), shapable=False)
        except Exception as exc:  # a damaged or unsupported file: the others still serve
            log.warning("PDF font %s not usable: %s", path, exc)
            return None
        pdfmetrics.registerFont(font)
        return Font(name, frozenset(font.face.charToGlyph))

    regular: list[Font] = []
    bold: list[Font] = []
    for n, (name, file, bold_file) in enumerate((BASE, *FALLBACKS)):
        font = load(name, file)
        if font is None:
            if n == 0:
                log.warning(
                    "PDF reports: %s not found (Debian: fonts-dejavu-core); text outside Latin-1 needs it",
                    FONT_DIR / file,
                )
                regular.append(Font("Helvetica", None))
                bold.append(Font("Helvetica-Bold", None))
            continue
        regular.append(font)
        bold.append((bold_file and load(name + "-Bold", bold_file)) or font)
    return Fonts(tuple(regular), tuple(bold))
