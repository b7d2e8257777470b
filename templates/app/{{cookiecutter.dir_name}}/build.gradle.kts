plugins {
    id("com.android.application") version "{{ cookiecutter.data.agp_version | kt }}" apply false
    id("org.jetbrains.kotlin.android") version "{{ cookiecutter.data.kotlin_plugin_version | kt }}" apply false
}
