#!/usr/bin/env bash
# native MuJoCo HalfCheetah with Brax HalfCheetah's tree settings, one draw of 15 generations (100 -> 520-step
# episodes), by arm: one population of 1,000 trees (one), 4 independent islands of 250 (islands4), tournaments
# of 5 or 10 instead of 20 (tournament5, tournament10), racing off with 500 trees at the same cost (racingoff500);
# `OUT=<folder> ARMS="one islands4" bash run.sh 0 1 2 ...`
cd "$(dirname "$0")/../.."  # the repository root
COMMON="env=halfcheetah env.backend=mujoco gp.population_size=1000 gp.generations=15 gp.time_limit=null
 gp.functions=[add,sub,mul,div] gp.const_range=[-5.0,5.0] gp.tournament_size=20 env.normalize_obs=false
 gp.init_every_output=false gp.es_share=0 gp.max_len=64 gp.max_depth=8
 env.episode_schedule={start:100,ramp_generations:30} env.racing={horizon:0.25,finalists:0.25}
 task.refine=false task.simplify=false wandb.mode=disabled progress=false"
for seed in "$@"; do
  for arm in ${ARMS:-one islands4}; do
    case $arm in
      one) extra="" ;;
      islands4) extra="gp.islands=4 gp.migrants=0" ;;
      tournament*) extra="gp.tournament_size=${arm#tournament}" ;;
      racingoff500) extra="env.racing={horizon:1} gp.population_size=500" ;;
    esac
    out=${OUT:-/tmp/isl_study}/${arm}_s$seed
    s=$(date +%s)
    python3 train.py $COMMON $extra seed=$seed hydra.run.dir=$out > $out.log 2>&1
    echo "{\"arm\": \"$arm\", \"seed\": $seed, \"rc\": $?, \"wall_s\": $(( $(date +%s) - s ))}" >> ${OUT:-/tmp/isl_study}/runs.jsonl
  done
done
