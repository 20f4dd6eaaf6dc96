"""One trial end to end: settings -> pre-boot check -> boot, watch, warm pass, measure, stop -> a record.

    run        the trial's context, its phases and its record (TrialResult)
    loadsweep  `tune --load-sweep`: one boot, several load points
"""
