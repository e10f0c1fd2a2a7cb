#!/usr/bin/env bash
# The corpus on the GPU machine, N processes side by side: eager, then Inductor with accuracy, per file.
# The corpus is fixtures/sglang-thunderfx (in the checkout); carry .whl. Rows go to $OUT/corpus_I.jsonl.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
python3 -c "import pydantic" 2>/dev/null || python3 -m pip install -q --no-index --no-deps --target .site .whl/opt/*.whl
export PYTHONPATH=$PWD/.site:$PWD
N=4
for i in $(seq 0 $((N-1))); do
  timeout 560 python3 benchmarks/replay_memory.py corpus fixtures/sglang-thunderfx --shard $i/$N > $OUT/corpus_$i.jsonl 2> $OUT/corpus_$i.err &
done
wait
cat $OUT/corpus_*.jsonl | python3 -c "
import sys, json, collections
rows=[json.loads(l) for l in sys.stdin if l.strip()]
c=collections.Counter((r.get('eager'), r['status'], r.get('trusted')) for r in rows)
print(len(rows), c)
for r in rows:
    if r['status']!='pass': print(r)
rat=[r['ratio'] for r in rows if r.get('ratio') and r['input_gib']>0.5]
print('ratios >0.5GiB', sorted(rat))
"
