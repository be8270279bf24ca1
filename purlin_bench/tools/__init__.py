"""The tools a user runs: check, bench, tune and export, over the measurement service.

One each: check (the correctness matrix), bench
(nccl-tests-style tables beside the baselines), tune (Optuna studies into
plans) and export (plans for a serving stack). Each uses the measurement
service and the plans; the CLI only parses and prints."""
