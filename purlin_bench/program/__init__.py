"""Orchestration data: SNAC programs, their schedule walk and their validator."""

from purlin_bench.program.model import Consume, FlagRef, Notify, Program, Ref, Stage, StepId
from purlin_bench.program.validate import ProgramInvalid, validate

__all__ = ["Consume", "FlagRef", "Notify", "Program", "ProgramInvalid", "Ref", "Stage", "StepId", "validate"]
