FROM python:3.11-slim
WORKDIR /app
# torch==2.13.0 resolves to the CPU wheel index below; PyPI's default torch wheel pulls several GB of CUDA.
# Graphviz's dot draws the Topology view; g++ is TorchInductor's compiler for the inductor-cpu target; chromium's
# SwiftShader (a software Vulkan GPU) with the Vulkan loader runs LiteRT's GPU delegate for litert-gpu. DejaVu:
# the font for the symbols xc writes (✓ ✗ ⚠ → ◆ ▸ µ …), which Graphviz sizes the Topology's boxes with and the
# image's Chromium draws; the slim image has no font at all.
RUN apt-get update && apt-get install -y --no-install-recommends graphviz g++ chromium libvulkan1 fonts-dejavu-core \
 && rm -rf /var/lib/apt/lists/*
COPY requirements.txt requirements-nodeps.txt ./
RUN pip install --no-cache-dir --extra-index-url https://download.pytorch.org/whl/cpu -r requirements.txt \
 && pip install --no-cache-dir --no-deps -r requirements-nodeps.txt
COPY app.py ./
COPY assets ./assets
# config.toml only: a secrets.toml in the build folder (sign-in's client and cookie secrets) never enters the image;
# mount it at run time (docs/deployment.md).
COPY .streamlit/config.toml ./.streamlit/config.toml
COPY pages ./pages
COPY xc_core ./xc_core
# xc's Model Explorer extension (`xc explorer`) and the documentation site (`xc docs`)
COPY xc_model_explorer ./xc_model_explorer
COPY mkdocs.yml ./
COPY docs ./docs
# the `xc` command in the container (its dependencies are installed above)
COPY pyproject.toml README.md ./
RUN pip install --no-cache-dir --no-deps -e .
# The run store (reports, inputs, artifacts of every run); mount a volume to keep runs across containers.
ENV XC_HOME=/data/xc
VOLUME /data
EXPOSE 8501
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 \
  CMD python -c "import urllib.request,sys; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:8501/_stcore/health', timeout=4).status == 200 else 1)"
# Published on every interface on purpose: a container's loopback cannot be reached through `docker run -p`, so this
# overrides config.toml's 127.0.0.1. Whoever reaches port 8501 can then upload models and read every stored run —
# unless sign-in is configured: mount a secrets.toml with an [auth] section at /app/.streamlit/secrets.toml
# (docs/deployment.md).
CMD ["python", "-m", "streamlit", "run", "app.py", "--server.address=0.0.0.0", "--server.port=8501", \
     "--server.headless=true", "--browser.gatherUsageStats=false"]
