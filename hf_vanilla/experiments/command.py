"""``hf-vanilla compare ARGS``: the command's door. It plans the experiment (:mod:`.compare`), then runs it
(:mod:`.experiment`), answering a refusal in one sentence before anything trains."""

from __future__ import annotations

import shlex
import sys
from collections.abc import Callable

from ..errors import HfVanillaError, refuse
from .compare import CompareError, build_parser, make_plan, with_study


def run_command(argv: list[str], before_run: Callable[[], None] | None = None) -> int:
    """``hf-vanilla compare ARGS``: 0 when the report is written, 2 with one sentence when refused."""
    args = build_parser().parse_args(with_study(argv))
    try:
        plan = make_plan(args, "hf-vanilla compare " + shlex.join(argv))
    except (CompareError, ValueError, FileNotFoundError) as error:
        return refuse("compare", error)
    if before_run is not None:
        before_run()
    # the training stack only once the plan is accepted (a refusal answers before torch loads)
    from .experiment import run_plan

    try:
        return run_plan(plan, workers=args.workers, threads=args.threads, estimate_only=args.estimate,
                        time_limit_minutes=args.time_limit_minutes)
    except KeyboardInterrupt:
        print("hf-vanilla compare: interrupted; the same command goes on where it stopped", file=sys.stderr)
        return 130
    except (HfVanillaError, OSError, ValueError) as error:
        return refuse("compare", error)


def main(argv: list[str] | None = None) -> int:
    return run_command(sys.argv[1:] if argv is None else list(argv))


if __name__ == "__main__":
    sys.exit(main())
