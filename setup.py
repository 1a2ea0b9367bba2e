from pathlib import Path

from setuptools import setup

version = {}
exec(Path("autotune/version.py").read_text().split("@functools")[0].replace("import functools", ""), version)

setup(
    name="autotune",
    version=version["__version__"],
    description="A tensor-program auto-tuner on TVM 0.27: schedule templates, a learned cost model, honest measurement",
    long_description=Path("README.md").read_text() if Path("README.md").exists() else "",
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    packages=["autotune", "autotune.tuners", "search_spaces", "cost_models"],
    install_requires=[
        "apache-tvm==0.27.*",
        "apache-tvm-ffi<0.1.15",  # 0.1.15 segfaults in tvm.ir.save_json (and so in MetaSchedule)
        "cloudpickle",            # tvm.support.popen_pool (MetaSchedule baseline)
        "psutil",
        "tornado",                # TVM's RPC tracker
        "xgboost>=2.0",
        "numpy",
        "tqdm",
    ],
    extras_require={
        "test": ["pytest>=7", "pytest-timeout", "torch==2.13.0", "matplotlib"],
        "torch": ["torch==2.13.0"],
        "plot": ["matplotlib"],
        "bench": ["torch==2.13.0", "matplotlib", "threadpoolctl", "transformers"],
    },
    entry_points={
        "console_scripts": ["autotune=autotune.cli:main"],
        "torch_dynamo_backends": ["autotune = autotune.torch_backend:autotune_backend"],
    },
)
