"""`purlin bench`: nccl-tests-style measurements with baselines and a roofline."""
