import pytest

pytest.importorskip("ray.data", reason="pterun.ray needs the ray extra")


@pytest.fixture(scope="session")
def ray_cluster():
    """A local cluster of 2 CPUs, shared by every test here (starting one takes seconds)."""
    from tests.support.ray_cluster import start

    ray = start(num_cpus=2, num_gpus=0)
    yield ray
    ray.shutdown()
