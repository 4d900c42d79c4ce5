"""The training verdicts' names, defined once (orchestrator/judging/verdict.py says what each means and
judges them)."""

DIVERGED, MEMORY_CREEP, NO_SIGNAL, TRUNCATED = "diverged", "memory_creep", "no_signal", "truncated"
COLLAPSED, LEARNING = "collapsed", "learning"
OK, TOO_SHORT = "ok", "too_short"
# The verdicts that flag a trial: something went wrong.
PROBLEMS = (DIVERGED, MEMORY_CREEP, NO_SIGNAL, TRUNCATED, COLLAPSED)
PRECEDENCE = (*PROBLEMS, LEARNING)
VERDICTS = (*PRECEDENCE, OK, TOO_SHORT)
# Verdicts certain the step they hold, so a trial may end there (memory_creep is a projection).
STOPPABLE = (DIVERGED, NO_SIGNAL, TRUNCATED, COLLAPSED)
# A verdict in a table cell.
VERDICT_WORDS = {
    DIVERGED: "diverged",
    MEMORY_CREEP: "memory creep",
    NO_SIGNAL: "no signal",
    TRUNCATED: "truncated",
    COLLAPSED: "collapsed",
    LEARNING: "learning",
    OK: "ok",
    TOO_SHORT: "too short",
}
MARK = "⚠"
