"""Differential fuzzing of audit's YAML paths: wherever rapid.py takes a text, it must read what the reference does.

    python -m bench.audit_yaml_fuzz [--seed 1] [--texts 100000] [--documents 20000]

Two generators: random texts made of YAML's indicators and words (mostly invalid YAML: rapid.py
must leave those to the libyaml path, which words the error), and random documents dumped by
PyYAML in every style, sometimes unquoted or without the last line break. Each case is read by
`rapid.documents` and by manifests.Documents with the reference loader (manifests.Loader); a case rapid.py
takes and answers otherwise is printed. Too slow for the test suite (which keeps a hypothesis
version of the second generator).
"""

from __future__ import annotations

import argparse
import random
import string

import yaml

from webhook.kubeyaml import Documents, Loader, rapid

ATOMS = ["|\n  ", ">-\n  ", "\n    ", "key: ", "k: |\n  t\n", "\t", '"q"', "&a ", "*a", "!!str ", "? ", "a", "b", "x1",
         ":", ": ", "- ", "-", " ", "  ", "\n", "\n  ", "\n- ", "[", "]", "{", "}", ",", "'", '"', "#", "1", "0",
         ".", "e", "|", ">", "---\n", "...\n", "y", "true", "null", "~", "=", "@", "`"]  # fmt: skip
WORDS = ["a", "name", "yes", "no", "on", "1", "0", "-1", "1.5", "1e3", "0777", "0x1F", "~", "null", "true", "False",
         "2024-01-02", "1:20", "a b", "a: b", "a #b", "x'y", 'x"y', "", " lead", "trail ", "multi\nline", "tab\tin",
         "é", "“q”", "*/5", "100m", "16Gi", "-", "- x", "[x]", "{x}", ",", "?", "@x", "`x", "%x", "!x", "&x",
         "a\n\nb", "  ", "\n", "0.", ".5", "+1", "1_0", "08"]  # fmt: skip


def reference(text: str) -> object:
    try:
        return repr(list(Documents(text, Loader)))
    except yaml.YAMLError:
        return "error"


def check(text: str) -> bool:
    taken = rapid.documents(text.encode())
    if taken is None:
        return True
    same = repr(taken) == reference(text)
    if not same:
        print(f"differs: {text!r}: rapid {taken!r}, reference {reference(text)}")
    return same


def value(rng: random.Random, depth: int = 0) -> object:
    roll = rng.random()
    if depth > 3 or roll < 0.5:
        pick = rng.random()
        if pick < 0.7:
            return rng.choice(WORDS) + (rng.choice(string.ascii_letters) if rng.random() < 0.2 else "")
        if pick < 0.8:
            return rng.randint(-(10**20), 10**20)
        if pick < 0.9:
            return rng.choice([True, False, None])
        return rng.random() * 10 ** rng.randint(-5, 25)
    if roll < 0.75:
        return {rng.choice(WORDS): value(rng, depth + 1) for _ in range(rng.randint(0, 4))}
    return [value(rng, depth + 1) for _ in range(rng.randint(0, 4))]


def document(rng: random.Random) -> str:
    text = yaml.safe_dump_all(
        [value(rng) for _ in range(rng.randint(1, 3))],
        default_flow_style=rng.choice([False, True, None]),
        allow_unicode=rng.random() < 0.5,
        width=rng.choice([20, 80, 1000]),
        indent=rng.choice([2, 4]),
        explicit_start=rng.random() < 0.5,
        default_style=rng.choice([None, None, None, "'", '"']),
    )
    if rng.random() < 0.5:
        text = text.replace("'", "")  # unquote: the resolvers decide
    return text.rstrip("\n") if rng.random() < 0.2 else text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--texts", type=int, default=100_000)
    parser.add_argument("--documents", type=int, default=20_000)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    texts = ["".join(rng.choice(ATOMS) for _ in range(rng.randint(1, 14))) for _ in range(args.texts)]
    bad = sum(not check(text) for text in texts)
    bad += sum(not check(document(rng)) for _ in range(args.documents))
    print(f"{args.texts + args.documents} cases, {bad} read otherwise by rapid.py")
    raise SystemExit(1 if bad else 0)


if __name__ == "__main__":
    main()
