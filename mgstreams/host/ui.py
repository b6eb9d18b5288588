"""The host's web page (`GET /ui`): every stream's verdict, its lag over the last hour, its partitions.

Everything is drawn here, on the server, as HTML and inline SVG, with no third-party CSS. One small script
(ui_script.py, allowed by the page's Content-Security-Policy by its hash) updates the parts marked `data-live`
in place and shows a stream's `check` preview. Functions over the lag sampler's values (StreamLag, LagPoint,
OffsetChangeMark), so the page is tested without a browser as well as in one.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from html import escape

from stream_registry.lag.verdict import OffsetChangeMark
from stream_registry.model import LagPoint, StreamLag
from stream_registry.stream_engine import spark_line

from .ui_script import SCRIPT

HOUR_S = 3600.0
WIDTH, HEIGHT = 720, 160
LEFT, RIGHT, TOP, BOTTOM = 56, 12, 12, 24     # plot margins, px
VERDICT_COLORS = {"OK": "#2e7d32", "STARTING": "#546e7a", "REWIND": "#1565c0", "WARN": "#f9a825", "STALL": "#ef6c00", "STOP": "#c62828",
                  "ERR": "#6a1b9a"}
QUIET = "#757575"   # STOP of a stream an operator stopped (or never started) with nothing waiting: no alarm
LINE = {"lag": "#1f77b4", "lag-seconds": "#9467bd"}
# a thinner line per partition on the lag chart, the colours taken in turn (none is a verdict's or the total's)
PARTITION_COLORS = ("#ff7f0e", "#17becf", "#e377c2", "#bcbd22", "#8c564b", "#7f7f7f", "#d62728", "#98df8a")

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5rem; color: #222; }
table { border-collapse: collapse; margin: 0.5rem 0 1rem; }
th, td { text-align: left; padding: 0.2rem 0.7rem; border-bottom: 1px solid #ddd; font-variant-numeric: tabular-nums; }
th { background: #f4f4f4; }
.verdict { color: #fff; padding: 0.05rem 0.45rem; border-radius: 0.3rem; font-weight: 600; }
section { margin-top: 2rem; border-top: 2px solid #eee; padding-top: 0.5rem; }
figure { margin: 0.3rem 0; } figcaption { font-size: 0.85rem; color: #555; }
svg text { font-size: 10px; fill: #555; } .muted { color: #777; font-size: 0.85rem; }
.key { display: inline-block; width: 1.2rem; height: 0.2rem; vertical-align: middle; margin: 0 0.2rem 0 0.6rem; }
.preview td:nth-child(4), .preview td:nth-child(5) { font-family: monospace; white-space: pre-wrap; }
"""


def page(streams: Sequence[StreamLag], series: Callable[[str], tuple[list[LagPoint], list[OffsetChangeMark]]],
         now: float, refresh_s: float = 5.0, spark: Mapping[str, Mapping] | None = None) -> str:
    """The whole page: a summary table, then one section per stream (`spark`: a Spark stream's query by stream
    name, StreamInfo.spark, shown in its section)."""
    at = datetime.fromtimestamp(now, tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    rows = "".join(
        f'<tr data-stream="{escape(s.name)}" data-verdict="{s.status.value}"><td><a href="#stream-{escape(s.name)}">'
        f"{escape(s.name)}</a></td><td>{s.stream_status.value}</td><td>{_stream_verdict(s)}</td>"
        f"<td>{_lag(s.total_lag, s.last_known_total_lag, s.last_known_age_s)}</td><td>{_num(s.max_lag_seconds)}</td><td>{s.records_per_second:.1f}</td>"
        f'<td data-count="dead-lettered">{s.dead_lettered}</td><td data-count="skipped">{s.skipped}</td>'
        f'<td data-count="pending">{s.pending_changes}</td><td data-count="lost">{_lost(s)}</td>'
        f"<td>{escape(s.error or s.message)}</td></tr>" for s in streams)
    summary = (f'<table id="streams"><thead><tr><th>stream</th><th>state</th><th>verdict</th><th>lag</th>'
               f"<th>lag seconds</th><th>records/s</th><th>dead-lettered</th><th>skipped</th>"
               f"<th>pending changes</th><th>records lost</th><th>why</th></tr></thead><tbody>{rows}</tbody></table>"
               if streams else '<p id="streams">No streams yet: create one with <code>mgstreams</code>, the API or '
                               "<code>CALL streams.create</code>.</p>")
    sections = "".join(_section(s, *series(s.name), now, (spark or {}).get(s.name)) for s in streams)
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>mgstreams: lag</title>'
            f'<style>{_STYLE}</style></head><body data-refresh-s="{refresh_s:g}" data-updates="0">'
            f'<h1>mgstreams</h1><div id="page"><p class="muted" data-live="summary-line">{len(streams)} stream(s) '
            f"at {at}; lag sampled every {streams[0].interval_s if streams else refresh_s:g} s{_oldest(streams)}."
            f'</p><div data-live="summary">{summary}</div>{sections}</div>'
            f'<p class="muted" id="live-note">updated in place every {refresh_s:g} s</p>'
            f"<script>{SCRIPT}</script></body></html>")


def _oldest(streams: Sequence[StreamLag]) -> str:
    """How old the oldest sample shown is (the sampler may be stuck on an unreachable cluster)."""
    ages = [s.age_s for s in streams if s.age_s is not None]
    unsampled = sum(1 for s in streams if s.sampled_at is None)
    return "".join((f'; <span id="sample-age">oldest sample {max(ages):.0f} s old</span>' if ages else "",
                    f"; {unsampled} stream(s) not sampled yet" if unsampled else ""))


def _section(s: StreamLag, points: list[LagPoint], changes: list[OffsetChangeMark], now: float,
             spark: Mapping | None = None) -> str:
    partitions = "".join(
        f'<tr data-partition="{escape(p.topic)}:{p.partition}"><td>{escape(p.topic)}</td><td>{p.partition}</td>'
        f"<td>{_num(p.committed_offset)}</td><td>{p.log_end_offset}</td><td>{_lag(p.lag, p.last_known_lag, p.last_known_age_s)}</td>"
        f"<td>{_num(p.lag_seconds)}</td><td>{p.lag_seconds_method.value}</td><td>{_verdict(p.status.value)}</td>"
        f"<td>{escape(p.message)}</td></tr>" for p in s.partitions)
    lines = _partition_lines(points)
    lag_chart = chart([(p.at, float(p.total_lag)) for p in points], changes, now, kind="lag",
                      title=f"{s.name}: lag (offsets) {_over(points, now)}", partitions=lines)
    keys = "".join(f'<span class="key" style="background:{color}"></span>{escape(tp)}'
                   for tp, (color, _) in lines.items())
    seconds_chart = chart([(p.at, p.max_lag_seconds) for p in points if p.max_lag_seconds is not None], changes,
                          now, kind="lag-seconds", title=f"{s.name}: lag (seconds) {_over(points, now)}", unit="s")
    name = escape(s.name)
    return (f'<section id="stream-{name}" data-stream="{name}"><div data-live="stream-{name}">'
            f"<h2>{name} {_stream_verdict(s)} <span class=\"muted\">{s.stream_status.value}, "
            f"group {escape(s.consumer_group)}</span></h2><p>{escape(s.error or s.message)}</p>"
            + (f'<p class="spark">{escape(spark_line(spark))}</p>' if spark is not None else "") +
            f'<figure>{lag_chart}<figcaption>Lag in offsets: the total (thick line)<span class="key" '
            f'style="background:{LINE["lag"]}"></span>and per partition{keys}; dashed lines: offset changes '
            f"(set_stream_offset).</figcaption></figure>"
            f"<figure>{seconds_chart}<figcaption>Age of the oldest unprocessed message, in seconds (the largest "
            f"of its partitions).</figcaption></figure>"
            f'<table class="partitions"><thead><tr><th>topic</th><th>partition</th><th>committed</th>'
            f"<th>log end</th><th>lag</th><th>lag seconds</th><th>method</th><th>verdict</th><th>why</th></tr>"
            f"</thead><tbody>{partitions}</tbody></table></div>{_preview_form(s.name)}</section>")


def _preview_form(name: str) -> str:
    """`check`'s preview of the stream (the script posts it to /streams/{name}/check): the records at an offset
    and the statements the transformation makes of them, nothing written."""
    return (f'<details class="preview-box"><summary>Preview records and the statements they make (check)</summary>'
            f'<form class="preview-form" data-stream="{escape(name)}">offset <input name="offset" value="committed" '
            f'aria-label="offset" size="24"> records per partition <input name="limit" type="number" min="1" '
            f'value="5" aria-label="limit" size="4"> <button type="submit">Preview</button> <span class="muted">'
            f"committed, earliest, latest, an offset, -N, or a JSON map of partitions</span></form>"
            f'<div class="preview-out"></div></details>')


def _partition_lines(points: Sequence[LagPoint]) -> dict[str, tuple[str, list[tuple[float, float]]]]:
    """Per `topic:partition`, its colour and its (time, lag) points: a line each on the lag chart."""
    series: dict[str, list[tuple[float, float]]] = {}
    for p in points:
        for topic, partition, lag in p.partitions:
            series.setdefault(f"{topic}:{partition}", []).append((p.at, float(lag)))
    return {tp: (PARTITION_COLORS[i % len(PARTITION_COLORS)], line) for i, (tp, line) in enumerate(sorted(series.items()))}


MIN_SPAN_S = 1.0    # the narrowest window a chart shows (a stream of one sample)


def window(points: Sequence[tuple[float, float]], now: float) -> tuple[float, float]:
    """(start, span) of a chart's time axis: from its oldest point within the hour to `now` (at least MIN_SPAN_S),
    so a new stream's line fills the chart instead of a sliver at the right of a fixed hour."""
    oldest = min((t for t, _ in points if now - HOUR_S <= t <= now), default=now - HOUR_S)
    span = min(max(now - oldest, MIN_SPAN_S), HOUR_S)
    return now - span, span


def _tick(t: float, span: float) -> str:
    return datetime.fromtimestamp(t, tz=UTC).strftime("%H:%M" if span >= 600 else "%H:%M:%S")


def chart(points: Sequence[tuple[float, float]], changes: Sequence[OffsetChangeMark], now: float, *, kind: str,
          title: str, unit: str = "",
          partitions: Mapping[str, tuple[str, Sequence[tuple[float, float]]]] | None = None) -> str:
    """An SVG line chart of (time, value) over the window its points need (window()), at most the hour before
    `now`, with a dashed marker per change."""
    start, span = window(points, now)
    shown = [(t, v) for t, v in points if start <= t <= now]
    top = max((v for _, v in shown), default=0.0) or 1.0
    width, height = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def x(t: float) -> float:
        return LEFT + (t - start) / span * width

    def y(v: float) -> float:
        return TOP + height - v / top * height

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" data-kind="{kind}" '
             f'data-points="{len(shown)}" data-span-s="{span:.0f}" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" '
             f'role="img" aria-label="{escape(title)}"><title>{escape(title)}</title>',
             f'<rect x="{LEFT}" y="{TOP}" width="{width}" height="{height}" fill="#fafafa" stroke="#ccc"/>']
    for fraction in (0.0, 0.5, 1.0):
        value = top * fraction
        parts.append(f'<line x1="{LEFT}" x2="{LEFT + width}" y1="{y(value):.1f}" y2="{y(value):.1f}" '
                     f'stroke="#e4e4e4"/><text x="{LEFT - 4}" y="{y(value) + 3:.1f}" text-anchor="end">'
                     f"{_axis(value)}{unit}</text>")
    for i in range(7):   # seven ticks across whatever the window spans
        t = start + span * i / 6
        anchor = "start" if i == 0 else "end" if i == 6 else "middle"
        parts.append(f'<text x="{x(t):.1f}" y="{HEIGHT - 6}" text-anchor="{anchor}">{_tick(t, span)}</text>')
    for c in changes:
        if start <= c.at <= now:
            ident = f"change {c.change_id}" if c.change_id is not None else "offset change"
            parts.append(f'<line class="change" data-change-id="{c.change_id if c.change_id is not None else ""}" '
                         f'x1="{x(c.at):.1f}" x2="{x(c.at):.1f}" y1="{TOP}" y2="{TOP + height}" stroke="#1565c0" '
                         f'stroke-dasharray="4 3" stroke-width="1.5"><title>{escape(ident)}: {escape(c.topic)}:'
                         f"{c.partition} {_num(c.previous_offset)} to {c.offset}</title></line>")
    for tp, (color, line) in (partitions or {}).items():   # under the total, thinner
        drawn = [(t, v) for t, v in line if start <= t <= now]
        if drawn:
            coords = " ".join(f"{x(t):.1f},{y(v):.1f}" for t, v in drawn)
            parts.append(f'<polyline class="partition" data-partition="{escape(tp)}" data-points="{len(drawn)}" '
                         f'points="{coords}" fill="none" stroke="{color}" stroke-width="1.5" stroke-linejoin="round">'
                         f"<title>{escape(tp)}</title></polyline>")
    if shown:
        coords = " ".join(f"{x(t):.1f},{y(v):.1f}" for t, v in shown)
        parts.append(f'<polyline class="series" points="{coords}" fill="none" stroke="{LINE[kind]}" '
                     f'stroke-width="2" stroke-linejoin="round"/>')
        if len(shown) == 1:
            [(t, v)] = shown
            parts.append(f'<circle cx="{x(t):.1f}" cy="{y(v):.1f}" r="3" fill="{LINE[kind]}"/>')
    else:
        parts.append(f'<text x="{LEFT + width / 2}" y="{TOP + height / 2}" text-anchor="middle">no samples yet'
                     f"</text>")
    parts.append("</svg>")
    return "".join(parts)


def _over(points: Sequence[LagPoint], now: float) -> str:
    _, span = window([(p.at, 0.0) for p in points], now)
    return "over the last hour" if span >= HOUR_S else f"over the last {span / 60:.0f} min" if span >= 120 \
        else f"over the last {span:.0f} s"


def _lag(value: int | None, last: int | None, age: float | None) -> str:
    """A lag of the last round; not known (the round could not sample it), `?` with the last known value and its
    age."""
    if value is not None:
        return str(value)
    known = f"last {last}" + (f", {age:.0f} s ago" if age is not None else "") if last is not None else ""
    return (f'<span class="unknown" title="not known: the last round could not sample it">?'
            f'{f" ({known})" if known else ""}</span>')


def _verdict(value: str, color: str | None = None) -> str:
    color = color or VERDICT_COLORS.get(value, "#555")
    return f'<span class="verdict" style="background:{color}">{escape(value)}</span>'


def _stream_verdict(s: StreamLag) -> str:
    return _verdict(s.status.value, QUIET if s.quiet else None)


def _lost(s: StreamLag) -> str:
    unseen = f" ({s.records_lost_unacknowledged} not acknowledged)" if s.records_lost_unacknowledged else ""
    return f"{s.records_lost}{unseen}"


def _num(value) -> str:
    if value is None:
        return "-"
    return f"{value:.1f}" if isinstance(value, float) else str(value)


def _axis(value: float) -> str:
    if value >= 1_000_000:
        return f"{value / 1_000_000:.1f}M"
    if value >= 10_000:
        return f"{value / 1000:.0f}k"
    return f"{value:.0f}" if value >= 10 or value == int(value) else f"{value:.1f}"
