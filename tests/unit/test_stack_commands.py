"""Commands the local stack builds for Kafka's tools."""

from pathlib import Path

from kappa.stack.local import _format_command


def test_a_cluster_id_starting_with_a_dash_stays_one_argument() -> None:
    # base64url ids start with "-" one time in 64; as a separate argument the tool's parser read it as an
    # option and the stack failed to start ("argument --cluster-id/-t: expected one argument").
    command = _format_command("java", "jars/*", Path("server.properties"), "-AbCdEfGhIjKlMnOpQrStUv")
    assert "--cluster-id=-AbCdEfGhIjKlMnOpQrStUv" in command
    assert "-AbCdEfGhIjKlMnOpQrStUv" not in command
