"""Report PDFs in any script: non-Latin text drawn in Unicode fonts embedded in the PDF (app/reports/pdf_text)."""

from __future__ import annotations

import io
import re
import unicodedata
from datetime import UTC, datetime

import pytest
from pypdf import PdfReader

from app.reports import pdf_text
from app.reports.delivery import to_pdf
from app.reports.runner import Result


def test_a_pdf_draws_non_latin_text_in_embedded_fonts():
    """A report's name, columns and cells in Japanese, Cyrillic and Arabic are drawn in Unicode fonts embedded
    in the PDF (Helvetica has Latin-1 only: they were ■■■), Arabic joined and in display order."""
    missing = [
        p
        for p in (pdf_text.FONT_DIR / pdf_text.BASE[1], pdf_text.FONT_DIR / pdf_text.FALLBACKS[0][1])
        if not p.is_file()
    ]
    if missing:
        pytest.skip(f"{missing} not installed (Debian: apt-get install fonts-dejavu-core fonts-droid-fallback)")
    title = "Отчёт 週次レポート تقرير"
    result = Result(
        ["ページ", "страна", "count"],
        [["/日本語のページ", "Россия", 3], ["/ru/москва", "مصر", 2], ["/latin", "Deutschland", 1]],
        datetime(2026, 11, 1, tzinfo=UTC),
    )
    reader = PdfReader(io.BytesIO(to_pdf(title, result)))
    text = reader.pages[0].extract_text()
    assert "■" not in text, text
    for shown in (
        "Отчёт",
        "週次レポート",
        "ページ",
        "страна",
        "/日本語のページ",
        "Россия",
        "/ru/москва",
        "Deutschland",
    ):
        assert shown in text, (shown, text)
    # Arabic is drawn as joined letters (presentation forms) in display order, which pypdf reads back right to
    # left: the words as stored (drawn in stored order, they read back reversed).
    drawn = re.findall("[\ufe70-\ufefc]+", text)
    assert sorted(unicodedata.normalize("NFKC", d) for d in drawn) == ["تقرير", "مصر"], drawn
    # The fonts are embedded (subsets), one with each script's glyphs.
    embedded = {}
    for font in reader.pages[0]["/Resources"]["/Font"].values():
        font = font.get_object()
        descriptor = (
            font["/DescendantFonts"][0].get_object()["/FontDescriptor"]
            if "/DescendantFonts" in font
            else font.get("/FontDescriptor")
        )
        embedded[str(font["/BaseFont"]).split("+")[-1]] = bool(descriptor and "/FontFile2" in descriptor)
    assert all(embedded.get(name) for name in ("DejaVuSans", "DejaVuSans-Bold", "DroidSansFallback")), embedded
    # Every character is drawn by a font that has a glyph for it.
    fonts = pdf_text.fonts()
    by_name = {f.name: f for f in (*fonts.regular, *fonts.bold)}
    for cell in (title, "ページ", "/日本語のページ", "Россия", "مصر"):
        for bold in (False, True):
            for name, run in fonts.runs(cell, bold):
                assert all(by_name[name].has(c) for c in run if not c.isspace()), (cell, name, run)
