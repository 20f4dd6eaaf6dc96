"""The words every layer shares, and nothing else (a leaf: it imports no other part of the tuner;
record.py imports only Optuna).

    status    how a trial ended (TrialStatus), shared by the model's verdicts, the trial and the report
    display   numbers in human units and prediction bands, the same in the terminal and the HTML page
    record    a stored trial read back, typed (TrialRecord.from_frozen): every layer reads a trial through it
    cost      what a trial cost: cards held, device seconds, accelerator-hours
    errors/   the errors a user can cause or meet (UserError exit 2, RuntimeFailure exit 1), full disks, hangups
"""
