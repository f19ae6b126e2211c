"""Not a measurement: checks that every relative link of RESULTS.md, README.md and log/*.md resolves (the file
exists, and so does the anchor: an `<a id="...">` or a heading's slug), that anchors are unique per log file, and
that every script of benchmarks/ and benchmarks/peers/ is in the index (README.md). Exit status 1 on a problem.

    python3 benchmarks/check_links.py
"""
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent
ANCHOR = re.compile(r'<a id="([^"]+)"></a>')


def anchors(path: pathlib.Path) -> set:
    text = path.read_text()
    ids = set(ANCHOR.findall(text))
    for heading in re.findall(r'^#{1,6} (.+)$', text, re.M):          # GitHub-style heading slugs
        ids.add(re.sub(r'[^\w\- ]', '', heading.lower()).replace(' ', '-'))
    return ids


def main() -> int:
    problems, links = [], 0
    logs = sorted((ROOT / 'log').glob('*.md'))
    for md in [ROOT / 'RESULTS.md', ROOT / 'README.md', *logs]:
        for target in re.findall(r'\]\(([^)\s]+)\)', md.read_text()):
            if re.match(r'[a-z]+://', target):
                continue
            links += 1
            file, _, frag = target.partition('#')
            dest = (md.parent / file).resolve() if file else md
            if not dest.exists():
                problems.append(f'{md.relative_to(ROOT)}: missing file {target}')
            elif frag and (dest.is_dir() or frag not in anchors(dest)):
                problems.append(f'{md.relative_to(ROOT)}: missing anchor {target}')
    for md in logs:
        ids = ANCHOR.findall(md.read_text())
        problems += [f'{md.relative_to(ROOT)}: anchor {i} twice' for i in sorted({i for i in ids if ids.count(i) > 1})]
    listed = set(re.findall(r'^\| `([^`]+)` \|', (ROOT / 'README.md').read_text(), re.M))
    present = {p.name for p in ROOT.glob('*.py')} | {p.name for p in ROOT.glob('*.json')}
    present |= {f'peers/{p.name}' for p in (ROOT / 'peers').iterdir() if p.is_file()}
    problems += [f'not in the index: {s}' for s in sorted(present - listed)]
    problems += [f'in the index but absent: {s}' for s in sorted(listed - present)]
    print('\n'.join(problems + [f'{links} links checked, {len(present)} files indexed, {len(problems)} problems']))
    return 1 if problems else 0


if __name__ == '__main__':
    sys.exit(main())
