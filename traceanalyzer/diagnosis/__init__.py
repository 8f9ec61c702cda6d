"""Diagnosis: Timeline + Analysis -> Diagnosis. Why the GPU waited, and what to do about it.

`host` finds the launching threads and sorts their events into causes, `attribution` gives every
idle gap one cause, `rules` turns the time lost per cause into a verdict and findings, `advice`
holds the next steps per framework and `thresholds` every constant the rules use.
"""

from .host import CAUSES
from .job import diagnose
from .rules import VERDICTS, Diagnosis, Finding, RankDiagnosis

__all__ = ["CAUSES", "VERDICTS", "Diagnosis", "Finding", "RankDiagnosis", "diagnose"]
