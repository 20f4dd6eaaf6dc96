"""The tuning-efficiency benchmark (entry point: benchmarks/tuning_efficiency.py), one module per concern.

- problems.py: the tuning problems (search space, hardware, workload, reference point). A new problem is a
  `Problem` added to `problems()`.
- truth.py: the scenarios (how the hardware differs from the tuner's prior) and the true table of each
  problem and scenario, its Pareto front and hypervolume.
- boot.py: the log events a boot gives the tuner's BootTracker, the warmup abort replayed on them.
- runner.py: VirtualRunner, `run_study`'s runner that answers from the true table.
- contenders.py: the methods compared and one study of one of them. A new contender or mode is a
  `Contender` added to `CONTENDERS` (its flags read in `run_contender`).
- scoring.py: curves, aggregates over seeds, the machine-readable summary, the JSON document.
- noise.py: the noise family (scenarios typical_noise, noisy_node): the nominal truth, measured with
  per-boot warm-up drift, per-run throughput and latency noise (tails heavier) and a first-run penalty.
- noisescore.py: the noise cells' scores: the true figures of what each contender recommends (true-value
  hypervolume of its front, the regret of its balanced and SLO picks, the SLO-break rate).
- replay.py: the upgrade problem's replay of 1.21.2 settings on 1.22.
- render.py: the markdown tables.
- fitted.py: problem "fitted" (`--problems fitted`): bucket sets fitted to the workload against
  min/step/max ranges on one long-tailed chat trace, compared on one scale (its own report).
"""
