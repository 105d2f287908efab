"""camus-xdp command line (placeholder replaced below)."""
import click


@click.group()
def main() -> None:
    """camus-xdp."""
