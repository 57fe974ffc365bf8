"""Rendering a report result as CSV or PDF and emailing it over SMTP (aiosmtplib)."""

from __future__ import annotations

import asyncio
import io
import re
from email.message import EmailMessage
from email.utils import formatdate
from urllib.parse import unquote, urlparse

import aiosmtplib

from app.csv_cells import csv_line
from app.reports.runner import Result
from app.responses import iso_ms

PDF_MAX_ROWS = 2_000  # a PDF is for reading; the CSV carries everything


def to_csv(result: Result) -> bytes:
    """As the event export writes CSV: formulas defused, objects and arrays as JSON, NULL as empty."""
    body = result.json()
    lines = [csv_line(body["columns"])]
    lines.extend(csv_line(["" if v is None else v for v in row]) for row in body["rows"])
    return "".join(lines).encode()


def to_pdf(title: str, result: Result) -> bytes:
    from reportlab.lib import colors
    from reportlab.lib.pagesizes import A4, landscape
    from reportlab.lib.styles import getSampleStyleSheet
    from reportlab.platypus import Paragraph, SimpleDocTemplate, Spacer, Table, TableStyle

    styles = getSampleStyleSheet()
    body = result.json()
    rows = body["rows"][:PDF_MAX_ROWS]
    story = [
        Paragraph(_escape(title), styles["Title"]),
        Paragraph(f"Generated at {body['generated_at']}", styles["Normal"]),
        Spacer(1, 12),
    ]
    if len(body["rows"]) > PDF_MAX_ROWS:
        story.append(Paragraph(f"First {PDF_MAX_ROWS} of {len(body['rows'])} rows; the CSV format has all.",
                               styles["Italic"]))
    data = [body["columns"], *[["" if v is None else str(v) for v in row] for row in rows]]
    table = Table(data, repeatRows=1)
    table.setStyle(TableStyle([
        ("BACKGROUND", (0, 0), (-1, 0), colors.HexColor("#e8e8e8")),
        ("FONTNAME", (0, 0), (-1, 0), "Helvetica-Bold"),
        ("FONTSIZE", (0, 0), (-1, -1), 8),
        ("GRID", (0, 0), (-1, -1), 0.25, colors.grey),
    ]))
    story.append(table)
    out = io.BytesIO()
    SimpleDocTemplate(out, pagesize=landscape(A4), title=title).build(story)
    return out.getvalue()


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", name).strip("-").lower()[:60] or "report"


async def build_message(*, sender: str, recipients: list[str], report_name: str, fmt: str, result: Result,
                        message_id: str) -> EmailMessage:
    msg = EmailMessage()
    # A name may hold line breaks, which a header cannot: they become spaces (the mail library raised).
    msg["Subject"] = "Tally report: " + " ".join(report_name.split())
    msg["From"] = sender
    msg["To"] = ", ".join(recipients)
    msg["Date"] = formatdate(usegmt=True)
    # Stable per delivery, so a retried send after a crash can be recognised as the same message.
    msg["Message-ID"] = message_id
    msg.set_content(
        f"Your scheduled report \"{report_name}\" ran at {iso_ms(result.generated_at)} "
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
