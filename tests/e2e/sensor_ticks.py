"""Evaluate the code location's deployment-health sensor on the Dagster instance of DAGSTER_HOME, as its daemon
does every SENSOR_INTERVAL_S, but every few seconds: its observations (what the asset's Plots tab draws) are
stored as the daemon stores them. For a test that wants several ticks in less than minutes; run it in the code
location's environment (cwd: the pipeline copy's code, its KAPPA_* settings):

    python -m tests.e2e.sensor_ticks --ticks 5 --every 5
"""

from __future__ import annotations

import argparse
import time

from dagster import DagsterInstance, build_sensor_context

from dagster_project.definitions import defs
from dagster_project.operations import SENSOR_NAME
from dagster_project.resources import KappaResource


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ticks", type=int, default=5)
    parser.add_argument("--every", type=float, default=5.0, help="seconds between ticks")
    args = parser.parse_args()
    instance = DagsterInstance.get()
    sensor = defs.get_sensor_def(SENSOR_NAME)
    cursor: str | None = None
    for tick in range(args.ticks):
        if tick:
            time.sleep(args.every)
        with build_sensor_context(instance=instance, cursor=cursor, resources={"kappa": KappaResource()}) as context:
            result = sensor(context)
        cursor = result.cursor
        for event in result.asset_events:
            instance.report_runless_asset_event(event)
        print(f"tick {tick}: {len(result.asset_events)} observations", flush=True)


if __name__ == "__main__":
    main()
