"""The performance model of vLLM on Gaudi, shared by the tuner (pre-boot prediction, calibration, the
live warmup projection) and the simulated server (which runs the same model as its truth).

    hardware     Gaudi devices and model shapes (constants of docs/calibration.md section 7.4)
    rules        release cost rules: warmup/capture style per release, env defaults as the release reads them
    corrections  the calibrated factors applied to the documented constants
    costs        step, compile and memory costs (CostModel), memory split, bucket geometry
    prediction   StartupPrediction and its parts;  capture  warmup order and HPU-graph capture per release
    predict      predict_startup()
    calibration  corrections fitted from what boots showed (stored in the study)
    projection   the live warmup projection from the known bucket list
"""

from .corrections import Corrections
from .costs import CostModel, ServerInputs, SimSettings
from .predict import predict_startup
from .prediction import StartupPrediction, WarmupStep

__all__ = ["Corrections", "CostModel", "ServerInputs", "SimSettings", "StartupPrediction", "WarmupStep",
           "predict_startup"]
