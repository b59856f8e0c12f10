"""The stack's Prometheus (`kappa up --monitoring`): Debian's package, scraping every job version's metrics through
the target files their runs write (kappa.runtime.metrics: file_sd, so a new deployment is found without a
reload), with the alert rules of KAPPA_PROMETHEUS_RULES."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import httpx

from kappa.core.errors import StackError
from kappa.core.settings import KappaSettings

RETENTION = "15d"


def prometheus_binary() -> str:
    binary = shutil.which("prometheus")
    if binary is None:
        raise StackError("Prometheus is not installed: `make setup` installs Debian's package (apt-get install "
                         "prometheus), or put a prometheus executable on PATH")  # fmt: skip
    return binary


def prometheus_argv(settings: KappaSettings, home: Path) -> tuple[list[str], str]:
    """(the command line of a Prometheus whose configuration and data are in `home`, its marker: the data folder,
    which no other process has)."""
    config = home / "prometheus.yml"
    config.write_text(prometheus_config(settings))
    marker = f"--storage.tsdb.path={home / 'data'}"
    argv = [
        prometheus_binary(),
        f"--config.file={config}",
        marker,
        f"--web.listen-address=127.0.0.1:{settings.prometheus_port}",
        f"--storage.tsdb.retention.time={RETENTION}",
        "--log.level=warn",
    ]
    return argv, marker


def prometheus_healthy(url: str) -> bool:
    return httpx.get(f"{url}/-/ready", timeout=3).status_code == 200


def prometheus_config(settings: KappaSettings) -> str:
    """The stack's Prometheus configuration: the job versions' target files (file_sd), the alert rules.
    honor_labels: a series' own `job` label (the platform's job) is kept, not renamed for the scrape job's."""
    interval = f"{settings.prometheus_scrape_interval_s:g}s"
    rules = [str(settings.prometheus_rules)] if settings.prometheus_rules else []
    config = {
        "global": {"scrape_interval": interval, "evaluation_interval": interval},
        "rule_files": rules,
        "scrape_configs": [
            {
                "job_name": "kappa",
                "honor_labels": True,
                "file_sd_configs": [
                    {"files": [str(settings.deployments_path / "*.scrape.json")], "refresh_interval": interval}
                ],
            }
        ],
    }
    return json.dumps(config, indent=2) + "\n"  # JSON is YAML
