"""`python -m bench.soak`: the soak's options, the run, and its report (the last line is the figure)."""
from __future__ import annotations

import argparse
import random
import shutil
import sys
import tempfile
from collections import Counter
from datetime import datetime
from pathlib import Path

from . import __doc__ as OVERVIEW
from .evidence import contradictions, invalid_offsets, unexplained_cuts
from .plan import PARTITIONS, STREAMS
from .runner import Soak


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench.soak", description=OVERVIEW.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n".join(OVERVIEW.splitlines()[2:]))
    length = parser.add_mutually_exclusive_group()
    length.add_argument("--minutes", type=float, help="how long faults are injected (default 2)")
    length.add_argument("--seconds", type=float, help="the same in seconds (short runs)")
    parser.add_argument("--seed", type=int, default=None, help="fault choice and order (default: random, printed)")
    parser.add_argument("--rate", type=float, default=150.0, help="messages per second, all topics (default 150)")
    parser.add_argument("--interval", type=float, default=1.5, help="mean seconds between faults (default 1.5)")
    parser.add_argument("--delivery", choices=("at_least_once", "exactly_once"), default="at_least_once",
                        help="the streams' delivery (exactly_once adds stream process kills and ambiguous commits)")
    parser.add_argument("--keep", metavar="DIR", help="keep the work directory here (kept anyway on failure)")
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    seconds = args.seconds if args.seconds is not None else 60 * (args.minutes if args.minutes is not None else 2)
    if seconds <= 0 or args.rate <= 0 or args.interval <= 0:
        parser.error("--minutes/--seconds, --rate and --interval must be positive")
    if args.seed is None:
        args.seed = random.SystemRandom().randrange(1_000_000)
    if args.keep:
        work = Path(args.keep).resolve()
        work.mkdir(parents=True, exist_ok=True)
    else:
        work = Path(tempfile.mkdtemp(prefix="mgstreams-soak-"))
    print(f"soak: seed {args.seed}, {seconds:g} s of faults, {args.rate:g} msg/s, {args.delivery}, work dir {work}",
          flush=True)
    soak = Soak(args, work)
    failed = True
    try:
        soak.setup()
        soak.say(f"soak: host at {soak.host.url}, {len(STREAMS)} streams x {PARTITIONS} partitions running "
                 f"(eager, cooperative-sticky and KIP-848 groups, one of tasks: 2 on FalkorDB over Bolt); "
                 f"injecting faults")
        soak.run_faults(seconds)
        soak.quiesce()
        caught_up, log_ends = soak.catch_up()
        soak.final_history()
        code = soak.host.terminate(60)
        soak.exit_codes.append(("SIGTERM", code))
        verdict, corrupt, per_stream = soak.check(log_ends)
        leaked = soak.secrets_in_log()
        faults = soak.faults + soak.fired()
        produced = sum(log_ends.values())
        for name, v in per_stream.items():
            soak.say(f"  {name}: {v.records} lines; lost {v.lost}, skipped {v.skipped}, stale {v.stale}, "
                     f"duplicates {v.duplicates}, replayed after backward moves {v.replayed}, "
                     f"consumed and committed by a foreign member {v.foreign}, "
                     f"seq mismatches {v.mismatched}")
            if name in soak.torn and soak.exactly_once:
                batches, deliveries = soak.torn[name]
                soak.say(f"  {name} (FalkorDB, no rollback): {batches} batches cut short by a kill between their "
                         f"data and their offsets, {deliveries} deliveries of them delivered again (the stated "
                         f"limit, not counted as duplicates); kills read: {sum(n == name for n, _ in soak.kills)}")
        calls = soak.calls
        statuses = Counter(r.status.value for c in calls for r in c.rows or [])
        soak.say(f"  cancel: {len(soak.cancelled)} pending rows cancelled")
        foreign = [m for m in soak.foreign_members]
        soak.say(f"  foreign members: {len(foreign)}, consumed {sum(m.consumed for m in foreign)}, committed "
                 f"{sum(len(c) for m in foreign for c in m.committed.values())} times; offsets they consumed and "
                 f"committed past, not delivered by the stream: {verdict.foreign}")
        if soak.exactly_once:
            soak.say(f"  file cuts: {len(soak.cut_moves)}, partitions whose stored offset they took back "
                     f"{sum(len(m.moves) for m in soak.cut_moves)} (each must be explained by a realigned history "
                     f"row: a contradiction otherwise)")
        soak.say(f"  set_offset and revert: {len(calls)} calls ({sum(c.rows is not None for c in calls)} answered, "
                 f"{sum(c.error is not None and not c.unknown for c in calls)} refused, "
                 f"{sum(c.unknown for c in calls)} unanswered); partition results {dict(statuses)}; "
                 f"history rows {sum(len(h) for h in soak.history.values())}")
        soak.say(f"  producer: {soak.producer.sent} sent, {len(soak.producer.failed)} failed; log ends total "
                 f"{produced}; corrupt sink lines {corrupt}")
        soak.say(f"  host: exits {soak.exit_codes}; streams that went to ERROR and were restarted: "
                 f"{len(soak.stream_errors)}")
        for when, name, error in soak.stream_errors[:5]:
            soak.say(f"    {datetime.fromtimestamp(when).strftime('%H:%M:%S')} {name}: {error[:300]}")
        for error, count in soak.describe_errors.most_common(3):
            soak.say(f"  finding: describe failed {count} time(s) during the catch-up: {error[:300]}")
        refusals = Counter(c.error for c in calls if c.error is not None and not c.unknown)
        for error, count in refusals.most_common(5):
            soak.say(f"  set_offset refused {count} time(s): {error[:300]}")
        soak.say(f"  secrets in the host log: {leaked}")
        invalid = invalid_offsets(soak.calls, soak.history)
        for text in invalid[:10]:
            soak.say(f"  invalid offset: {text}")
        for problem in verdict.problems[:30]:
            soak.say(f"  problem: {problem}")
        contradicted = contradictions(soak.calls, soak.history, soak.cancelled) + \
            unexplained_cuts(soak.cut_moves, soak.history)
        for text in contradicted[:10]:
            soak.say(f"  contradiction: {text}")
        lost = verdict.lost + verdict.skipped
        leaked_total = sum(leaked.values())
        sigterm = soak.exit_codes[-1][1]
        failed = bool(lost or verdict.stale or leaked_total or corrupt or verdict.mismatched or not caught_up
                      or sigterm != 0 or invalid or contradicted or (soak.exactly_once and verdict.duplicates))
        by_kind = ", ".join(f"{k} {n}" for k, n in sorted(faults.items()))
        if failed:
            soak.say(f"soak: FAILED (seed {args.seed}); evidence kept in {work}")
        soak.say(f"soak: {produced} records, {sum(faults.values())} faults ({by_kind}), lost {lost}, "
                 f"stale {verdict.stale}, contradictions {len(contradicted)}, duplicates {verdict.duplicates}, "
                 f"secrets in logs {leaked_total}")
        return 1 if failed else 0
    finally:
        soak.close()
        if not failed and not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
