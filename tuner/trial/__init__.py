"""One trial end to end: settings -> pre-boot check -> boot, watch, warm pass, measure, stop -> a record.

    run        the trial's context and its phases
    result     what a trial ended with (TrialResult), as the study tells and stores it
    loadsweep  `tune --load-sweep`: one boot, several load points
"""
