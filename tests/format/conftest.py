import pytest

from tests.format import programs


@pytest.fixture(scope="session")
def affine():
    return programs.affine()


@pytest.fixture(scope="session")
def stateful():
    return programs.stateful()


@pytest.fixture(scope="session")
def external():
    return programs.external()


@pytest.fixture(scope="session")
def trainable_external():
    return programs.trainable_external()


@pytest.fixture(scope="session")
def sin_inline():
    return programs.delegated(inline=True)


@pytest.fixture(scope="session")
def sin_segment():
    return programs.delegated(inline=False)


@pytest.fixture(scope="session")
def inline_constants():
    return programs.inline_constants()
