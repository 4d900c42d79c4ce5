"""How a figure reads in words, shared by the judges' estimates and the views."""


def duration(seconds: float) -> str:
    """'45 s', '3 min 20 s', '1 h 05 min'."""
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"


def short_names(names) -> dict[str, str]:
    """Each name -> its shortest form that no other of `names` could also be shortened to, for a table's
    column: a scheme ('random:') and leading path parts ('Qwen/') are dropped where that leaves it unique
    ('random:Qwen/Qwen3-1.7B' and 'random:Qwen/Qwen3-4B' read 'Qwen3-1.7B' and 'Qwen3-4B'); beside the
    same model's real weights a random-weight one keeps its scheme ('random:Qwen3-4B', 'Qwen/Qwen3-4B').
    A name whose every shorter form another shares stays whole. Names that are not text are left out."""
    texts = [n for n in dict.fromkeys(names) if isinstance(n, str)]
    forms = {name: _short_forms(name) for name in texts}
    chosen = {}
    for name in texts:
        others = {form for other in texts if other != name for form in forms[other]}
        chosen[name] = next((form for form in forms[name] if form not in others), name)
    return chosen


def _short_forms(name: str) -> list[str]:
    """'random:Qwen/Qwen3-4B' -> ['Qwen3-4B', 'random:Qwen3-4B', 'Qwen/Qwen3-4B', 'random:Qwen/Qwen3-4B']:
    shortest first, each path tail without its scheme, then with it."""
    head, colon, rest = name.partition(":")
    scheme, path = (head + colon, rest) if colon and "/" not in head else ("", name)
    parts = path.split("/")
    tails = ["/".join(parts[i:]) for i in range(len(parts) - 1, -1, -1)]
    return list(
        dict.fromkeys(form for tail in tails for form in ((tail, scheme + tail) if scheme else (tail,)))
    )
