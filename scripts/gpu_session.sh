#!/usr/bin/env bash
# One step of a GPU benchmark session, sized for one call of at most 10 minutes.
#
# The work is cut into steps that each fit, in priority order; a later session goes on with what
# an earlier one committed (`restore`). Results accumulate in $KEEP and every step packs the small
# files of all steps so far into $OUT, so the latest call's files are the whole picture. Steps:
#
#   bash scripts/gpu_session.sh smoke             # 16 trials of a 1024^3 fp16 matmul: does it all work here?
#                                                 #   (and are its 8 fastest kernels right: ms-pruner check --top 8;
#                                                 #   its best exported, run from the library: ms-pruner export)
#   bash scripts/gpu_session.sh matmul-stock      # stock MetaSchedule, 256 trials, our builder
#   bash scripts/gpu_session.sh matmul-pruner     # Pruner, same budget -> compare.{json,md,png}
#   bash scripts/gpu_session.sh conv-stock        # the conv2d layer, stock
#   bash scripts/gpu_session.sh conv-pruner       # the conv2d layer, Pruner
#   bash scripts/gpu_session.sh issue5            # the four runs above in one process, conv2d first
#   bash scripts/gpu_session.sh matmul            # the matmul pair alone in one process, stock first
#                                                 #   (after `restore`: the conv2d pair stays as restored; on a
#                                                 #   GPU that `restore` refused, a comparison of its own)
#   bash scripts/gpu_session.sh restore           # first: go on with the runs an earlier session committed
#                                                 #   (RERUN="SPEC=STRATEGY ...": make those finished runs again)
#   bash scripts/gpu_session.sh calibrate         # the restored stock runs' best records measured again here
#   bash scripts/gpu_session.sh builder-stock     # stock builder, 64 trials (ours = matmul-stock)
#   bash scripts/gpu_session.sh conv-replay       # 128 random conv2d candidates + analyze
#   bash scripts/gpu_session.sh models-stock      # bert-layer + resnet-block, stock
#   bash scripts/gpu_session.sh models-pruner     # the same with Pruner -> models.md
#   bash scripts/gpu_session.sh mma-ceiling       # the GPU's mma.sync ceiling (scripts/mma_ceiling.py)
#   bash scripts/gpu_session.sh mma-pruner        # Pruner on the `all` space (WMMA + mma), the matmul
#   bash scripts/gpu_session.sh mma-stock         # stock MetaSchedule on `all`, same settings
#   bash scripts/gpu_session.sh mma-more          # fp16->fp16 matmul and BERT's dense_bias, both, on `all`
#   bash scripts/gpu_session.sh mma-check         # every finished run's best kernel against the exact result and torch
#   bash scripts/gpu_session.sh suite-stock       # the tensorcore suite (10 fp16 kernels), stock, 128 trials each
#   bash scripts/gpu_session.sh suite-pruner      # the same with Pruner -> compare_suite/compare.md (missing runs listed)
#   bash scripts/gpu_session.sh ablate-first-round  # the suite with Pruner --no-first-round -> compare_no_first_round
#   bash scripts/gpu_session.sh ablate-verify     # the suite with Pruner --cost-model analyzer -> compare_analyzer_verify
#   bash scripts/gpu_session.sh ablate-climb      # the matmul on `all` with Pruner --set cold_climb_starts=0 (no
#                                                 #   analyzer climb in its first round) -> compare_no_climb
#                                                 #   (the mma-* comparisons go to $KEEP/compare_all)
#   bash scripts/gpu_session.sh ablate-unroll     # the same with MS_PRUNER_UNROLL_PARITY_LOOPS=0 (fragment copies
#                                                 #   picked by a loop's parity stay in local memory) -> compare_no_parity_unroll
#   bash scripts/gpu_session.sh ablate-epilogue   # BERT's dense_bias on `all` with MS_PRUNER_FUSE_EPILOGUE=0 (the mma
#                                                 #   family's bias a kernel of its own) -> compare_epilogue_apart
#   bash scripts/gpu_session.sh transfer-cold     # stock and Pruner, 64 trials, on two other matmul and two other conv2d shapes
#   bash scripts/gpu_session.sh transfer-warm     # Pruner on them with --warm-start from h100/work.tgz's runs
#   bash scripts/gpu_session.sh fleet             # one round of 64 of the matmul measured through a loopback RPC
#                                                 #   tracker and server, then through the local runner
#   bash scripts/gpu_session.sh moa               # MoA on the matmul (`all` space, beside compare_all's runs), its
#                                                 #   transformer pretrained on h100/work.tgz's runs (for an H200)
#
#   DEADLINE=$(( $(date +%s) + 570 )) bash scripts/gpu_session.sh queue matmul-stock matmul-pruner ...
#       runs the steps in order until DEADLINE (epoch seconds), each under the time left, so one call
#       fills its ten minutes and the machine is not left idle between steps; a step cut by the
#       deadline resumes when the next call queues it again, and a finished one is found done.
#
# Each tuning command runs with `--time-limit` short of the call limit: it ends after the last whole
# round that leaves no time for another as long as its longest (exit 124), so no round's search and
# build are thrown away; `timeout --foreground -s INT` at the same limit catches a round longer than
# foreseen (the CLI stops cleanly on SIGINT too). The work dir keeps every measured record, and
# `compare` keeps every run that finished and resumes the one that was cut (same work dir, clock going
# on), so a step cut short can simply be called again; a queue stops at the first step out of time.
set -uo pipefail
step=${1:?usage: gpu_session.sh STEP (see the header)}
cd "$(dirname "$0")/.."
export PYTHONPATH=/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH}
KEEP=${KEEP:-/tmp/ms_pruner_gpu}
OUT=${OUT:-$KEEP/out}
BUDGET=${BUDGET:-500}
TRIALS=${TRIALS:-256}
PER_ITER=${PER_ITER:-64}
# A model's trials count the records its work dir holds (a cut run resumes); at 16 a round, 320 give
# each of bert-layer's 19 tasks its round before any gets a second (resnet-block has 6).
MODEL_TRIALS=${MODEL_TRIALS:-320}
MODEL_PER_ITER=${MODEL_PER_ITER:-16}
TARGET=${TARGET:-cuda}
MM=${MM:-matmul:4096x4096x4096:float16:float32}
CONV=${CONV:-conv2d_nhwc:16x56x56x64x64k3s1p1:float16:float32}
ANALYZE=${ANALYZE:-1}
SPACE=${SPACE:-wmma}  # the first comparisons searched WMMA alone; the mma-* steps set all
COMPARE_DIR=${COMPARE_DIR:-compare}
MM16=${MM16:-matmul:4096x4096x4096:float16:float16}
FFN=${FFN:-dense_bias:2048x3072x768:float16:float32}
SUITE_TRIALS=${SUITE_TRIALS:-128}
# Transfer-tuning: other shapes of the two operators committed in docs/results/h100/work.tgz (BERT-base
# FFN GEMMs as plain matmuls; ResNet-50 stages 2 and 3), warm-started from those runs' databases.
TRANSFER=${TRANSFER:-matmul:2048x3072x768:float16:float32 matmul:2048x768x3072:float16:float32 \
conv2d_nhwc:16x28x28x128x128k3s1p1:float16:float32 conv2d_nhwc:16x14x14x256x256k3s1p1:float16:float32}
EXTRA=${EXTRA:-}  # more compare options (the ablations' switches)
mkdir -p "$KEEP" "$OUT"

if [ "$step" = queue ]; then
    shift
    : "${DEADLINE:?queue needs DEADLINE, the epoch second by which the call must end}"
    rm -f "$KEEP/out_of_time"
    for next in "$@"; do
        left=$(( DEADLINE - $(date +%s) ))
        # A stopped run finishes its phase and the files are copied within ~70 s of BUDGET.
        [ "$left" -gt 150 ] || { echo "== queue: ${left}s left, not starting $next" | tee -a "$KEEP/session.log"; exit 0; }
        BUDGET=$(( left - 70 )) bash "$0" "$next"
        [ ! -e "$KEEP/out_of_time" ] || { echo "== queue: $next ran out of time; queue it again next call" | tee -a "$KEEP/session.log"; exit 0; }
    done
    exit 0
fi

# Loads an exported library (argv[1]) and runs it on its workload's inputs (argv[2]) against the exact result.
RUN_EXPORTED='
import sys, numpy as np, tvm
from ms_pruner.workloads import parse_workload, relative_error
workload, device = parse_workload(sys.argv[2]), tvm.cuda(0) if tvm.cuda(0).exist else tvm.cpu(0)
inputs = workload.random_inputs(seed=1)
out = tvm.runtime.tensor(np.zeros(workload.output_shape(), workload.out_dtype), device)
tvm.runtime.load_module(sys.argv[1])["main"](*[tvm.runtime.tensor(x, device) for x in inputs], out)
error = relative_error(out.numpy(), workload.reference(inputs))
verdict = "ok" if error <= workload.tolerance else "EXPORT WRONG"
print(f"exported library {sys.argv[1]} on {device}: error {error:.2e} ({verdict})")'

ms() {
    timeout --foreground --signal=INT --kill-after=60 "$BUDGET" python3 -m ms_pruner "$@" --time-limit $(( BUDGET - 15 ))
    local status=$?
    [ "$status" -eq 0 ] || echo "== exit $status: ms-pruner $*" >&2
    # 124: the time limit ended the call (or timeout cut it): the run is unfinished.
    [ "$status" -ne 124 ] || touch "$KEEP/out_of_time"
    return "$status"
}
compare() {  # $1: workloads (space-separated, run in that order), $2: strategies (comma-separated)
    local workload strategy dir args=()
    for workload in $1; do args+=(--workload "$workload"); done
    ms compare "${args[@]}" --target "$TARGET" --trials "$TRIALS" --per-iter "$PER_ITER" --strategies "$2" --seed 0 \
        --space "$SPACE" --out "$KEEP/$COMPARE_DIR" --no-progress $EXTRA
    local status=$?
    # Every record of each run with the analyzer's estimate, kernel geometry and fetch widths, in
    # measurement order (64 a round): how round 0 did by geometry and width (widened hedges), and the
    # analyzer on GPU-measured records; .geometry.md groups them (ms-pruner geometry).
    [ "$ANALYZE" = 1 ] || return "$status"
    for workload in $1; do
        for strategy in ${2//,/ }; do
            for dir in "$KEEP/$COMPARE_DIR/work/${workload//:/_}/$strategy"-*; do
                [ -s "$dir/database_tuning_record.json" ] && python3 -m ms_pruner analyze --db "$dir" --json > "$dir.analyze.json" &&
                    python3 -m ms_pruner geometry "$dir.analyze.json" --per-round "$PER_ITER" > "$dir.geometry.md"
            done
        done
    done
    return "$status"
}
h100_runs() {  # the work dirs of docs/results/h100/work.tgz, unpacked once
    [ -d "$KEEP/h100_runs" ] || { mkdir -p "$KEEP/h100_runs" && tar xzf docs/results/h100/work.tgz -C "$KEEP/h100_runs"; }
    find "$KEEP/h100_runs" -name database_tuning_record.json -exec dirname {} \; | sort | tr '\n' ' '
}
models() {  # a model whose tune_model.json is there is done
    for model in ${MODELS:-bert-layer resnet-block}; do
        [ ! -s "$KEEP/models/$model-$1/tune_model.json" ] || continue
        ms tune-model --model "$model" --target "$TARGET" --trials "$MODEL_TRIALS" --per-iter "$MODEL_PER_ITER" \
            --strategy "$1" --seed 0 --work-dir "$KEEP/models/$model-$1" --no-progress \
            --export "$KEEP/models/$model-$1.so"  # loaded again and run here: a CUDA model library on a GPU
        # Exit 1: the compiled model disagreed with torch. Each task's best kernel held against its
        # own function names the wrong one (integer inputs drawn inside the axes they index).
        [ "$?" -ne 1 ] || timeout --foreground 150 python3 -m ms_pruner check --work-dir "$KEEP/models/$model-$1" \
            --target "$TARGET" --json > "$KEEP/models/$model-$1.check.json"
        [ ! -e "$KEEP/out_of_time" ] || break
    done
}

{
    echo "== $step $(date -u +%FT%TZ)"
    nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader || true
    echo "nvcc: $(nvcc --version 2>/dev/null | tail -1); cuda-bindings: $(python3 -c 'import cuda.bindings; print("yes")' 2>/dev/null || echo no)"
    case "$step" in
        smoke)
            # One small Pruner run through builder, runner and search on the GPU (~1-2 min): a broken
            # build or load shows here, not after eight minutes of matmul-stock.
            ms tune "${SMOKE:-matmul:1024x1024x1024:float16:float32}" --target "$TARGET" --trials 16 --per-iter 16 \
                --space "${SMOKE_SPACE:-auto}" \
                --seed 0 --work-dir "$KEEP/smoke" --no-progress
            python3 -m ms_pruner show --work-dir "$KEEP/smoke" | tee "$KEEP/smoke.txt"
            grep -q "valid); best" "$KEEP/smoke.txt" || echo "== SMOKE FAILED: no valid measurement; read $KEEP/smoke/logs before spending more device time"
            # The 8 fastest kernels against the exact result: on the mma space, the first outputs of
            # the m16n8k16 intrinsics (mma_k16.py) beside TVM's m16n8k8 ones.
            python3 -m ms_pruner check --work-dir "$KEEP/smoke" --workload "${SMOKE:-matmul:1024x1024x1024:float16:float32}" \
                --target "$TARGET" --top 8 | tee "$KEEP/smoke_check.txt"
            # The best exported as a library (ms-pruner export) and run from it by TVM's runtime alone.
            python3 -m ms_pruner export --work-dir "$KEEP/smoke" --out "$KEEP/smoke_best.so" &&
                python3 -c "$RUN_EXPORTED" "$KEEP/smoke_best.so" "${SMOKE:-matmul:1024x1024x1024:float16:float32}" |
                tee "$KEEP/smoke_export.txt" ;;
        restore)
            # Go on with the comparison an earlier session committed (compare.json + work.tgz under
            # $RESTORE): finished runs stay, a cut run resumes; refused (exit 1) on another GPU.
            # RERUN lists finished runs to make again with the current code (ms-pruner restore --rerun).
            rerun=(); for pair in ${RERUN:-}; do rerun+=(--rerun "$pair"); done
            [ -e "$KEEP/compare/compare.json" ] && echo "== $KEEP/compare already holds a comparison; not restoring" ||
                python3 -m ms_pruner restore --from "${RESTORE:-docs/results/h100}" --out "$KEEP/compare" \
                    --target "$TARGET" --trials "$TRIALS" --per-iter "$PER_ITER" --space "$SPACE" "${rerun[@]}" ;;
        calibrate)
            # Runs compared across sessions ran on two machines of one kind: the restored stock runs'
            # best records built and run again here say how far apart their timings are (remeasure.py).
            # The finished runs of compare.json only: a run RERUN set aside stays unpacked beside them.
            [ -e "$KEEP/compare/compare.json" ] || { echo "== calibrate: no comparison under $KEEP/compare"; exit 0; }
            timeout --foreground "$BUDGET" python3 -m ms_pruner remeasure --compare "$KEEP/compare" --strategy stock \
                --top "${CALIBRATE_TOP:-4}" --target "$TARGET" --json > "$KEEP/calibrate.json" && cat "$KEEP/calibrate.json" ;;
        matmul-stock) compare "$MM" stock ;;
        matmul-pruner) compare "$MM" pruner ;;
        conv-stock) compare "$CONV" stock ;;
        conv-pruner) compare "$CONV" pruner ;;
        # One process for the four runs (conv2d first: never compared yet), so a call pays the start-up
        # (tensor-intrinsic import among it, ~23 s: builder/__init__.py) once, not once a step;
        # --time-limit budgets each new run at the longest round the process has measured.
        issue5) compare "$CONV $MM" stock,pruner ;;
        matmul) compare "$MM" stock,pruner ;;
        builder-stock)
            # The stock builder compiles CUDA with TVM's callback, NVRTC by default, which needs the
            # cuda-bindings package (docs/builder.md); without it use TVM's documented nvcc mode.
            python3 -c "import cuda.bindings.nvrtc" 2>/dev/null || export TVM_CUDA_COMPILE_MODE=nvcc
            echo "stock builder compiles CUDA with ${TVM_CUDA_COMPILE_MODE:-nvrtc}"
            ms tune "$MM" --target "$TARGET" --strategy stock --builder stock --trials 64 --seed 0 \
                --work-dir "$KEEP/builder_stock" --no-progress
            python3 -m ms_pruner show --work-dir "$KEEP/builder_stock" > "$KEEP/builder_stock.txt" ;;
        conv-replay)
            ms tune "$CONV" --target "$TARGET" --strategy replay --trials "${REPLAY_TRIALS:-128}" --per-iter "${REPLAY_PER_ITER:-64}" --seed 0 \
                --work-dir "$KEEP/conv_replay" --no-progress
            python3 -m ms_pruner analyze --db "$KEEP/conv_replay" --json > "$KEEP/conv_replay_analyze.json" ;;
        mma-ceiling) python3 scripts/mma_ceiling.py --out "$KEEP/mma_ceiling.json" ;;
        mma-pruner) SPACE=all COMPARE_DIR=compare_all compare "$MM" pruner ;;
        mma-stock) SPACE=all COMPARE_DIR=compare_all compare "$MM" stock ;;
        mma-more) SPACE=all COMPARE_DIR=compare_all compare "$MM16 $FFN" pruner,stock ;;
        ablate-climb) SPACE=all COMPARE_DIR=compare_no_climb EXTRA="--set cold_climb_starts=0" compare "$MM" pruner ;;
        ablate-unroll) MS_PRUNER_UNROLL_PARITY_LOOPS=0 SPACE=all COMPARE_DIR=compare_no_parity_unroll \
            compare "$MM" pruner ;;
        ablate-epilogue) MS_PRUNER_FUSE_EPILOGUE=0 SPACE=all COMPARE_DIR=compare_epilogue_apart compare "$FFN" pruner ;;
        mma-check) timeout --foreground "$BUDGET" python3 -m ms_pruner check --compare "$KEEP/compare_all" \
            --target "$TARGET" --json > "$KEEP/check_all.json"; cat "$KEEP/check_all.json" ;;
        suite-stock|suite-pruner|ablate-first-round|ablate-verify)
            suite=$(python3 -c "from ms_pruner.workloads.suites import SUITES; print(' '.join(SUITES['tensorcore']))")
            case "$step" in
                suite-stock) SPACE=auto TRIALS=$SUITE_TRIALS COMPARE_DIR=compare_suite compare "$suite" stock ;;
                suite-pruner) SPACE=auto TRIALS=$SUITE_TRIALS COMPARE_DIR=compare_suite compare "$suite" pruner ;;
                ablate-first-round) SPACE=auto TRIALS=$SUITE_TRIALS COMPARE_DIR=compare_no_first_round \
                    EXTRA=--no-first-round compare "$suite" pruner ;;
                *) SPACE=auto TRIALS=$SUITE_TRIALS COMPARE_DIR=compare_analyzer_verify \
                    EXTRA="--cost-model analyzer" compare "$suite" pruner ;;
            esac ;;
        transfer-cold) SPACE=wmma TRIALS=64 COMPARE_DIR=compare_transfer_cold compare "$TRANSFER" stock,pruner ;;
        transfer-warm)
            SPACE=wmma TRIALS=64 COMPARE_DIR=compare_transfer_warm EXTRA="--warm-start $(h100_runs)" \
                compare "$TRANSFER" pruner ;;
        fleet)
            # --rpc on a GPU (docs/distributed.md): a seeded round of 64 measured by a server on this GPU
            # through a tracker, then one by the local runner: each best in fleet.txt, each round's run
            # seconds in the session log. A rerun resumes (a finished run has its 64 records).
            # LocalFleet starts the tracker and a server on free ports, waits until the server is
            # registered, writes the tracker's port and holds both until it is sent SIGTERM.
            started=$(date +%s); rm -f "$KEEP/fleet_port"; mkdir -p "$KEEP/fleet_logs"
            python3 -c 'import signal, sys
from ms_pruner.tuning.fleet import LocalFleet
with LocalFleet(sys.argv[1], key="gpu") as fleet:
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    print(fleet.port, flush=True)
    signal.sigwait({signal.SIGTERM})' "$KEEP/fleet_logs" > "$KEEP/fleet_port" &
            holder=$!
            while [ ! -s "$KEEP/fleet_port" ] && kill -0 "$holder" 2>/dev/null; do sleep 1; done
            [ -s "$KEEP/fleet_port" ] || { echo "== fleet: no local tracker and server (logs in $KEEP/fleet_logs)"; exit 1; }
            fleet_tune() { ms tune "$MM" --target "$TARGET" --trials 64 --per-iter 64 --seed 0 --space "$SPACE" \
                --work-dir "$KEEP/fleet/$1" --no-progress "${@:2}"; }
            fleet_tune rpc --rpc "127.0.0.1:$(cat "$KEEP/fleet_port"):gpu"
            # The RPC run's 8 fastest kernels timed again through the server, and below by the local
            # runner: the same kernels both ways.
            [ -e "$KEEP/out_of_time" ] || timeout --foreground 150 python3 -m ms_pruner remeasure --db "$KEEP/fleet/rpc" \
                --top 8 --repeat 3 --target "$TARGET" --rpc "127.0.0.1:$(cat "$KEEP/fleet_port"):gpu" --json \
                | tail -1 > "$KEEP/fleet_remeasure_rpc.json"
            kill "$holder"; wait "$holder"
            BUDGET=$(( BUDGET - $(date +%s) + started ))
            if [ ! -e "$KEEP/out_of_time" ]; then
                if [ "$BUDGET" -ge 120 ]; then fleet_tune local; else touch "$KEEP/out_of_time"; fi
            fi
            for run in rpc local; do python3 -m ms_pruner show --work-dir "$KEEP/fleet/$run"; done | tee "$KEEP/fleet.txt"
            # The two rounds' candidates differ (the draft runs on several threads; tests/test_golden_round.py),
            # so the RPC run's fastest kernels are timed again by the local runner (and above, through RPC).
            timeout --foreground 240 python3 -m ms_pruner remeasure --db "$KEEP/fleet/rpc" --top 8 --repeat 3 \
                --target "$TARGET" --json > "$KEEP/fleet_remeasure.json" && cat "$KEEP/fleet_remeasure.json" ;;
        moa)
            # The model pretrained on one GPU's runs and adapted online on another's (docs/cost_model.md
            # has the offline replay of it); compare.md then lists stock, pruner and moa side by side.
            model="$KEEP/moa_h100.pt"
            [ -s "$model" ] || { dbs=(); for dir in $(h100_runs); do dbs+=(--db "$dir"); done
                timeout --foreground "$BUDGET" python3 -m ms_pruner train --residual transformer "${dbs[@]}" \
                    --time-budget 120 --seed 0 --out "$model"; }
            SPACE=all COMPARE_DIR=compare_all EXTRA="--pretrained $model" compare "$MM" moa ;;
        models-stock) models stock ;;
        models-pruner)
            models pruner
            python3 -m ms_pruner model-table "$KEEP"/models/*-stock "$KEEP"/models/*-pruner \
                --out "$KEEP/models.md" ;;
        *) echo "unknown step '$step'; see the header of $0" >&2; exit 2 ;;
    esac
    echo "== $step done $(date -u +%FT%TZ)"
} 2>&1 | tee -a "$KEEP/session.log"

# The device gives back at most 8 files, 2 folders down: each comparison's work dirs as
# `ms-pruner restore` reads them (work<suffix>.tgz of compare<suffix>/: databases and round logs
# only, small enough to commit), every small file under $KEEP (keep.tgz: the comparisons' json, md
# and png, TVM's logs; built kernels stay behind), and the session log.
for dir in "$KEEP"/compare*/; do
    name=$(basename "$dir")
    [ ! -d "$dir/work" ] || (cd "$dir" &&
        find work -type f \( -name '*.json' -o -name '*.jsonl' \) -print | tar czf "$OUT/work${name#compare}.tgz" -T -)
done
(cd "$KEEP" && find . -path ./out -prune -o -type f -size -16M ! -name '*.so' ! -name '*.cubin' ! -name '*.tar' \
    ! -name '*.tgz' -print | tar czf "$OUT/keep.tgz" -T -)
[ ! -e "$KEEP/session.log" ] || cp "$KEEP/session.log" "$OUT/"
echo "wrote $(ls "$OUT" | tr '\n' ' ')to $OUT"
