#!/usr/bin/env python3
"""Replace the text between the results markers of DOC with the contents of TABLE."""
import sys

doc, table = sys.argv[1], sys.argv[2]
begin, end = "<!-- escape-results:begin -->", "<!-- escape-results:end -->"
text = open(doc).read()
if begin not in text or end not in text:
    sys.exit(f"{doc}: no {begin} / {end} markers")
head, rest = text.split(begin, 1)
_, tail = rest.split(end, 1)
open(doc, "w").write(head + begin + "\n" + open(table).read() + end + tail)
