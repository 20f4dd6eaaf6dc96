"""What a finished study gives: the exported pick, studies side by side, releases diffed.

    export       pick a trial from the feasible Pareto set and write its complete env file
    compare      studies side by side (the release-upgrade check)
    releasediff  two releases, the same settings: their bucket sets diffed offline (`compare --release`)
"""
