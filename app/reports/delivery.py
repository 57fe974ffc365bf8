"""Rendering a report result as CSV or PDF and emailing it over SMTP (aiosmtplib)."""

from __future__ import annotations

import asyncio
import io
import re
from email.message import EmailMessage
from email.utils import formatdate
from typing import Any
from urllib.parse import unquote, urlparse

import aiosmtplib
import orjson

from app.csv_cells import csv_line
from app.reports import pdf_text
from app.reports.runner import Result
from app.responses import iso_ms

PDF_MAX_ROWS = 2_000  # a PDF is for reading; the CSV carries everything


def to_csv(result: Result) -> bytes:
    """As the event export writes CSV: formulas defused, objects and arrays as JSON, NULL as empty."""
    body = result.json()
    lines = [csv_line(body["columns"])]
    lines.extend(csv_line(row) for row in body["rows"])
    return "".join(lines).encode()


def _text(value: Any) -> str:
    """A cell as the API's JSON shows it (a custom report's jsonb and boolean columns too), not Python's repr;
    strings bare, NULL empty."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return orjson.dumps(value).decode()


PDF_SIZE, PDF_PAD = 8, 3


def _column_groups(widths: list[float], room: float) -> list[list[int]]:
    """Columns split into tables that fit `room` points, each starting with the first column (the bucket,
    step or cohort that names the row): a wide result (26 weeks of retention) drawn as one table ran off
    both sides of the page, losing the cohort, its size and the last weeks."""
    groups, group, used = [], [0], widths[0]
    for i in range(1, len(widths)):
        if used + widths[i] > room and len(group) > 1:
            groups.append(group)
            group, used = [0], widths[0]
        group.append(i)
        used += widths[i]
    groups.append(group)
    return groups


class _Cell:
    """A cell's text as drawn: its font runs (pdf_text), natural width, and what the table is given: the
    plain string when it is one run of the style's own font and fits, else a Paragraph of font runs."""

    def __init__(self, text: str, fonts: pdf_text.Fonts, bold: bool = False) -> None:
        from reportlab.pdfbase.pdfmetrics import stringWidth

        self.runs = fonts.runs(text, bold)
        self.own = (fonts.bold if bold else fonts.regular)[0].name
        self.width = sum(stringWidth(t, name, PDF_SIZE) for name, t in self.runs)

    def markup(self) -> str:
        return "".join(
            t if name == self.own else f'<font name="{name}">{t}</font>'
            for name, t in ((name, _escape(t)) for name, t in self.runs)
        )

    def drawn(self, width: float, style: Any) -> Any:
        from reportlab.platypus import Paragraph

        if len(self.runs) <= 1 and all(name == self.own for name, _ in self.runs) and self.width + 2 * PDF_PAD < width:
            return self.runs[0][1] if self.runs else ""
        return Paragraph(self.markup(), style)


def to_pdf(title: str, result: Result) -> bytes:
    from reportlab.lib import colors
    from reportlab.lib.pagesizes import A4, landscape
    from reportlab.lib.styles import getSampleStyleSheet
    from reportlab.platypus import Paragraph, SimpleDocTemplate, Spacer, Table, TableStyle

    fonts = pdf_text.fonts()
    regular, bold = fonts.regular[0].name, fonts.bold[0].name
    styles = getSampleStyleSheet()
    normal = styles["Normal"].clone("normal", fontName=regular)
    cell_style = normal.clone("cell", fontSize=PDF_SIZE, leading=PDF_SIZE + 2)
    head_style = cell_style.clone("head", fontName=bold)
    body = result.json()
    rows = body["rows"][:PDF_MAX_ROWS]
    story = [
        Paragraph(_Cell(title, fonts, bold=True).markup(), styles["Title"].clone("title", fontName=bold)),
        Paragraph(f"Generated at {body['generated_at']}", normal),
        Spacer(1, 12),
    ]
    if len(body["rows"]) > PDF_MAX_ROWS:
        story.append(
            Paragraph(f"First {PDF_MAX_ROWS} of {len(body['rows'])} rows; the CSV format has all.", styles["Italic"])
        )
    columns = [_Cell(str(c), fonts, bold=True) for c in body["columns"]] or [_Cell("", fonts, bold=True)]
    cells = [[_Cell(_text(v), fonts) for v in row] or [_Cell("", fonts)] for row in rows]
    out = io.BytesIO()
    doc = SimpleDocTemplate(out, pagesize=landscape(A4), title=title, leftMargin=36, rightMargin=36)
    # Each column as wide as its widest cell; none wider than what is left beside the first column (at most a
    # third of the page), so that a pair always fits. Longer cells wrap (Paragraph).
    first_cap = doc.width / 3
    widths = []
    for i, name in enumerate(columns):
        text = max((r[i].width for r in cells), default=0)
        natural = max(name.width, text) + 2 * PDF_PAD + 1
        widths.append(min(natural, first_cap if i == 0 else doc.width - min(widths[0], first_cap)))
    groups = _column_groups(widths, doc.width)
    for n, group in enumerate(groups):
        if len(groups) > 1:
            story.append(
                Paragraph(
                    f"Columns {group[1 if len(group) > 1 else 0] + 1} to {group[-1] + 1} of {len(columns)}",
                    styles["Italic"],
                )
            )
        data = [[columns[i].drawn(widths[i], head_style) for i in group]]
        data.extend([row[i].drawn(widths[i], cell_style) for i in group] for row in cells)
        table = Table(data, colWidths=[widths[i] for i in group], repeatRows=1, hAlign="LEFT")
        table.setStyle(
            TableStyle(
                [
                    ("BACKGROUND", (0, 0), (-1, 0), colors.HexColor("#e8e8e8")),
                    ("FONTNAME", (0, 0), (-1, 0), bold),
                    ("FONTNAME", (0, 1), (-1, -1), regular),
                    ("FONTSIZE", (0, 0), (-1, -1), PDF_SIZE),
                    ("LEFTPADDING", (0, 0), (-1, -1), PDF_PAD),
                    ("RIGHTPADDING", (0, 0), (-1, -1), PDF_PAD),
                    ("VALIGN", (0, 0), (-1, -1), "TOP"),
                    ("GRID", (0, 0), (-1, -1), 0.25, colors.grey),
                ]
            )
        )
        story.extend([table, Spacer(1, 12)] if n < len(groups) - 1 else [table])
    doc.build(story)
    return out.getvalue()


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", name).strip("-").lower()[:60] or "report"


async def build_message(
    *, sender: str, recipients: list[str], report_name: str, fmt: str, result: Result, message_id: str
) -> EmailMessage:
    msg = EmailMessage()
    # A name may hold line breaks, which a header cannot: they become spaces (the mail library raised).
    msg["Subject"] = "Tally report: " + " ".join(report_name.split())
    msg["From"] = sender
    msg["To"] = ", ".join(recipients)
    msg["Date"] = formatdate(usegmt=True)
    # Stable per delivery, so a retried send after a crash can be recognised as the same message.
    msg["Message-ID"] = message_id
    msg.set_content(
        f'Your scheduled report "{report_name}" ran at {iso_ms(result.generated_at)} '
        f"({len(result.rows)} rows). The result is attached as {fmt.upper()}.\n"
    )
    filename = f"{_slug(report_name)}.{fmt}"
    if fmt == "pdf":
        pdf = await asyncio.to_thread(to_pdf, report_name, result)
        msg.add_attachment(pdf, maintype="application", subtype="pdf", filename=filename)
    else:
        msg.add_attachment(to_csv(result), maintype="text", subtype="csv", filename=filename)
    return msg


async def send(smtp_url: str, message: EmailMessage, seconds: float = 30.0) -> None:
    """smtp://[user:pass@]host[:port] (STARTTLS when offered) or smtps:// (implicit TLS)."""
    url = urlparse(smtp_url)
    implicit_tls = url.scheme == "smtps"
    await aiosmtplib.send(
        message,
        hostname=url.hostname or "localhost",
        port=url.port or (465 if implicit_tls else 25),
        username=unquote(url.username) if url.username else None,
        password=unquote(url.password) if url.password else None,
        use_tls=implicit_tls,
        timeout=seconds,
    )
