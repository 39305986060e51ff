"""Build hook for the one compiled part: ``perfmodel._forest``, the predictor's tree walk.

Everything else (metadata, dependencies, packages) is in pyproject.toml. The extension is optional: where
no C compiler is available the build goes on without it and the predictor walks its trees with numpy
(same leaves, about 3x slower on the speed benchmark's batches).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "perfmodel._forest",
            sources=["perfmodel/_forest.c"],
            extra_compile_args=["-O3"],
            optional=True,
        )
    ]
)
